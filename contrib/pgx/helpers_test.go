package ldpgx_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// long bounds a test's waits for what must happen eventually (a lease
// expiring, a job coming back): far beyond what it needs, so a loaded
// machine never fails it; only a bug reaches it.
const long = time.Minute

// db is a jobs table in a schema of the test's own in the shared server,
// dropped with everything in it at the test's end.
type db struct {
	dsn   string
	pool  *pgxpool.Pool // the test's own view: setup, inspection
	table string
}

// newDB creates a jobs table of a name of its own.
func newDB(t testing.TB) *db {
	t.Helper()
	dsn := live(t)
	schema := "ldpgx_test_" + randomHex(6)
	d := &db{dsn: dsn, pool: newPool(t, dsn), table: schema + ".jobs"}
	ctx := testsupport.Context(t, long)
	if _, err := d.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := d.pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping the schema %s: %v", schema, err)
		}
	})
	if err := ldpgx.CreateTable(ctx, d.pool, d.table); err != nil {
		t.Fatal(err)
	}
	return d
}

// quoted is the table's name for SQL.
func (d *db) quoted() string {
	return pgx.Identifier(strings.Split(d.table, ".")).Sanitize()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dsnVia is the DSN of d through addr (a proxy), with an application name
// the test can find its connections by.
func (d *db) dsnVia(t testing.TB, addr, app string) string {
	t.Helper()
	u, err := url.Parse(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		u.Host = addr
	}
	q := u.Query()
	q.Set("connect_timeout", "5")
	if app != "" {
		q.Set("application_name", app)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// source returns a Source on d's table through pool (d's own when nil),
// drained at the test's end.
func (d *db) source(t testing.TB, pool *pgxpool.Pool, cfg ldpgx.SourceConfig) *ldpgx.Source {
	t.Helper()
	if pool == nil {
		pool = d.pool
	}
	cfg.Table = d.table
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	src, err := ldpgx.NewSource(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = src.Drain(ctx)
	})
	return src
}

func (d *db) enqueue(t testing.TB, jobs ...ldpgx.EnqueueJob) {
	t.Helper()
	if err := ldpgx.Enqueue(testsupport.Context(t, long), d.pool, d.table, jobs...); err != nil {
		t.Fatal(err)
	}
}

// row is a job's row as the test reads it.
type row struct {
	state             string
	attempts, max     int
	runAt, leaseUntil *time.Time
	now               time.Time // PostgreSQL's, when read
	claimed           bool
}

// row reads the row of key; ok is false when there is none.
func (d *db) row(t testing.TB, key string) (r row, ok bool) {
	t.Helper()
	err := d.pool.QueryRow(testsupport.Context(t, long), fmt.Sprintf(
		`SELECT state, attempts, max_attempts, run_at, lease_until, clock_timestamp(), claim IS NOT NULL FROM %s WHERE key = $1`,
		d.quoted()), key).
		Scan(&r.state, &r.attempts, &r.max, &r.runAt, &r.leaseUntil, &r.now, &r.claimed)
	if err == pgx.ErrNoRows {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

// mustRow is row, failing t when there is none.
func (d *db) mustRow(t testing.TB, key string) row {
	t.Helper()
	r, ok := d.row(t, key)
	if !ok {
		t.Fatalf("no row of key %q", key)
	}
	return r
}

// exec runs sql (%s is the table) on d.
func (d *db) exec(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	tag, err := d.pool.Exec(testsupport.Context(t, long), fmt.Sprintf(sql, d.quoted()), args...)
	if err != nil {
		t.Fatal(err)
	}
	return tag.RowsAffected()
}

// counts are the table's rows not dead, and dead.
func (d *db) counts(t testing.TB) (pending, dead int) {
	t.Helper()
	err := d.pool.QueryRow(testsupport.Context(t, long), fmt.Sprintf(
		`SELECT count(*) FILTER (WHERE state <> 'dead'), count(*) FILTER (WHERE state = 'dead') FROM %s`,
		d.quoted())).Scan(&pending, &dead)
	if err != nil {
		t.Fatal(err)
	}
	return pending, dead
}

// fetch fetches one job, failing the test on an error or nothing.
func fetch(t testing.TB, src *ldpgx.Source, wait time.Duration) *ldpgx.Job {
	t.Helper()
	j, err := src.Fetch(testsupport.Context(t, long), wait)
	if err != nil || j == nil {
		t.Fatalf("Fetch(%s) = %v, %v; want a job", wait, j, err)
	}
	return j.(*ldpgx.Job)
}

// fetchNone asserts that a fetch of wait is an idle cycle.
func fetchNone(t testing.TB, src *ldpgx.Source, wait time.Duration, why string) {
	t.Helper()
	j, err := src.Fetch(testsupport.Context(t, long), wait)
	if err != nil || j != nil {
		t.Fatalf("Fetch(%s) = %v, %v; want an idle cycle (nil, nil): %s", wait, j, err, why)
	}
}

// eventually polls cond every 20ms until it holds, failing t after long.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(long)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", long, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits until logs holds text.
func waitLog(t testing.TB, logs *testsupport.LogBuffer, text string) {
	t.Helper()
	deadline := time.Now().Add(long)
	for !strings.Contains(logs.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for the log line %q; the log:\n%s", long, text, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newWorker returns a worker whose probes listen on a free port, with no
// signal handling, logging into logs (nil: nowhere).
func newWorker(t testing.TB, cfg worker.Config, logs io.Writer) *worker.Worker {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	cfg.Lifecycle.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.Lifecycle.ProbeAddr = "127.0.0.1:0"
	cfg.Lifecycle.IgnoreSignals = true
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run runs w in a goroutine; the returned function waits for Run's error.
func run(t testing.TB, w *worker.Worker) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	var err error
	waited := false
	t.Cleanup(func() {
		if !waited {
			w.Lifecycle().BeginShutdown("test cleanup")
			<-done
		}
	})
	return func() error {
		if !waited {
			err = testsupport.Recv(t, done, "the worker's Run")
			waited = true
		}
		return err
	}
}

// slogTo is a text logger into w.
func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func itoa(i int) string { return strconv.Itoa(i) }
