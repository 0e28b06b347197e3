package ldpgx_test

import (
	"context"
	"math"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/lameduck/lameduck/worker/sourcetest"
)

// suiteLease is the Sources' lease in the suite: a job whose runner's
// connections were cut comes back within it (the suite asks for a few
// seconds at most).
const suiteLease = 3 * time.Second

// The conformance suite every worker.Source passes, against the shared
// PostgreSQL, a schema of the test's own: short by default (about a minute
// on two cores), full sizes and a second run over a 100ms link with
// LAMEDUCK_SUITE_FULL=1. The restart scenario is skipped: it would restart
// the shared server.
func TestConformance(t *testing.T) {
	dsn := live(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, dsn)
	schema := "ldpgx_suite_" + randomHex(6)
	table := schema + ".jobs"
	quoted := pgx.Identifier{schema, "jobs"}.Sanitize()
	if _, err := pool.Exec(testsupport.Context(t, long), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping the schema %s: %v", schema, err)
		}
	})
	logs := new(testsupport.LogBuffer)
	var maxAttempts atomic.Int64
	h := sourcetest.Harness{
		Name: "postgres",
		Addr: u.Host,
		Reset: func(ctx context.Context, maxDeliver int) error {
			if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+quoted); err != nil {
				return err
			}
			if maxDeliver <= 0 {
				maxDeliver = math.MaxInt32 // unlimited, in practice
			}
			maxAttempts.Store(int64(maxDeliver))
			return ldpgx.CreateTable(ctx, pool, table)
		},
		Publish: func(ctx context.Context, ids []string) error {
			jobs := make([]ldpgx.EnqueueJob, len(ids))
			for i, id := range ids {
				jobs[i] = ldpgx.EnqueueJob{Key: id, MaxAttempts: int(maxAttempts.Load())}
			}
			return ldpgx.Enqueue(ctx, pool, table, jobs...)
		},
		NewSource: func(ctx context.Context, addr string) (worker.Source, func(), error) {
			v := *u
			v.Host = addr
			q := v.Query()
			q.Set("connect_timeout", "5")
			q.Set("pool_max_conns", "8") // the suite's 4 loops, their renewals and settlements
			v.RawQuery = q.Encode()
			p, err := pgxpool.New(ctx, v.String())
			if err != nil {
				return nil, nil, err
			}
			src, err := ldpgx.NewSource(p, ldpgx.SourceConfig{Table: table, Lease: suiteLease, Logger: slogTo(logs)})
			if err != nil {
				p.Close()
				return nil, nil, err
			}
			return src, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = src.Drain(ctx) // the runner drained it already; this stops a listener a late Fetch started
				p.Close()
			}, nil
		},
		Count: func(ctx context.Context) (sourcetest.Counts, error) {
			var c sourcetest.Counts
			var dead []string
			err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'dead'), count(*) FILTER (WHERE state = 'dead'),
	coalesce(array_agg(key) FILTER (WHERE state = 'dead'), '{}') FROM `+quoted).Scan(&c.Pending, &c.DeadLettered, &dead)
			c.DeadIDs = dead
			return c, err
		},
	}
	full := os.Getenv("LAMEDUCK_SUITE_FULL") != ""
	sourcetest.Run(t, h, sourcetest.Options{Short: !full})
	if full {
		sourcetest.Run(t, h, sourcetest.Options{Latency: 100 * time.Millisecond})
	}
	if t.Failed() {
		t.Logf("the Sources' log:\n%s", tail(logs.String(), 100))
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
