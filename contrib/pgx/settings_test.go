package ldpgx_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// A malformed setting is an error that begins "lameduck:" and names the
// setting, its value and the fix; never a silent default. No I/O is done:
// the pool is never dialled.
func TestMalformedSettingsAreErrors(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	long := strings.Repeat("x", 55)
	for _, c := range []struct {
		name string
		cfg  ldpgx.SourceConfig
		want []string
	}{
		{"two dots", ldpgx.SourceConfig{Table: "a.b.c"}, []string{`SourceConfig.Table="a.b.c"`, "more than one dot", `"schema.name"`}},
		{"empty part", ldpgx.SourceConfig{Table: "jobs."}, []string{`SourceConfig.Table="jobs."`, "empty part"}},
		{"name too long", ldpgx.SourceConfig{Table: long}, []string{"55 bytes", long + "_next_idx", "63"}},
		{"schema too long", ldpgx.SourceConfig{Table: strings.Repeat("s", 64) + ".jobs"}, []string{"schema of 64 bytes"}},
		{"negative lease", ldpgx.SourceConfig{Lease: -time.Second}, []string{"SourceConfig.Lease=-1s", "use 0 for 30s"}},
		{"lease under a second", ldpgx.SourceConfig{Lease: 500 * time.Millisecond}, []string{"SourceConfig.Lease=500ms", "at least 1s"}},
		{"negative claim timeout", ldpgx.SourceConfig{ClaimTimeout: -1}, []string{"SourceConfig.ClaimTimeout=-1ns", "use 0"}},
		{"claim timeout past half the lease", ldpgx.SourceConfig{Lease: 4 * time.Second, ClaimTimeout: 3 * time.Second},
			[]string{"SourceConfig.ClaimTimeout=3s", "half the Lease 4s", "at most 2s"}},
		{"negative poll", ldpgx.SourceConfig{Poll: -time.Second}, []string{"SourceConfig.Poll=-1s", "use 0 for 2s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := ldpgx.NewSource(pool, c.cfg)
			if err == nil {
				t.Fatalf("NewSource(%+v) = %v, nil; want an error", c.cfg, src)
			}
			if !strings.HasPrefix(err.Error(), "lameduck: ") {
				t.Errorf("error %q does not begin with lameduck:", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := ldpgx.NewSource(nil, ldpgx.SourceConfig{}); err == nil || !strings.Contains(err.Error(), "the pool is nil") {
		t.Fatalf("NewSource(nil) = %v; want an error naming the pool", err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		job  ldpgx.EnqueueJob
		want string
	}{
		{ldpgx.EnqueueJob{Key: "k", Delay: -time.Second}, `jobs[1] (key "k"): Delay=-1s is negative; use 0 for at once`},
		{ldpgx.EnqueueJob{Key: "k", MaxAttempts: -1}, `jobs[1] (key "k"): MaxAttempts=-1 is negative; use 0 for DefaultMaxAttempts (25)`},
	} {
		err := ldpgx.Enqueue(ctx, pool, "", ldpgx.EnqueueJob{}, c.job)
		if err == nil || !strings.HasPrefix(err.Error(), "lameduck: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Enqueue(%+v) = %v; want %q", c.job, err, c.want)
		}
	}
	if err := ldpgx.Enqueue(ctx, pool, "a.b.c"); err == nil || !strings.Contains(err.Error(), `Enqueue's table="a.b.c"`) {
		t.Errorf("Enqueue to a.b.c = %v; want the table named", err)
	}
	if err := ldpgx.CreateTable(ctx, pool, "a..b"); err == nil || !strings.Contains(err.Error(), `CreateTable's table="a..b"`) {
		t.Errorf("CreateTable(a..b) = %v; want the table named", err)
	}
	// Valid settings, resolved: the zero value is usable.
	src, err := ldpgx.NewSource(pool, ldpgx.SourceConfig{})
	if err != nil || src.Lease() != ldpgx.DefaultLease {
		t.Fatalf("NewSource(zero) = %v, %v; want a Source with the default lease", src, err)
	}
	if _, err := ldpgx.NewSource(pool, ldpgx.SourceConfig{Table: strings.Repeat("x", 54), Lease: ldpgx.MinLease}); err != nil {
		t.Fatalf("a 54-byte name and the least lease: %v", err)
	}
}

// CreateTable is safe from every replica at once, and again at each start:
// four at once on a new table, then once more, all succeed, and the table
// works.
func TestCreateTableConcurrentlyAndAgain(t *testing.T) {
	d := newDB(t)
	name := strings.Split(d.table, ".")[0] + ".other"
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- ldpgx.CreateTable(testsupport.Context(t, long), d.pool, name) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Inside the caller's transaction, too (a savepoint).
	tx, err := d.pool.Begin(testsupport.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	if err := ldpgx.CreateTable(testsupport.Context(t, long), tx, name); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testsupport.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	if err := ldpgx.Enqueue(testsupport.Context(t, long), d.pool, name, ldpgx.EnqueueJob{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	other := *d
	other.table = name
	src := other.source(t, nil, ldpgx.SourceConfig{})
	j := fetch(t, src, time.Second)
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// CreateTable on a table that exists takes no lock on it: a producer's
// transaction that enqueued and has not committed does not hold up a
// runner's start (DROP/CREATE TRIGGER would wait behind it).
func TestCreateTableOnAnExistingTableWaitsForNoWriter(t *testing.T) {
	d := newDB(t)
	tx, err := d.pool.Begin(testsupport.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := ldpgx.Enqueue(testsupport.Context(t, long), tx, d.table, ldpgx.EnqueueJob{Key: "open"}); err != nil {
		t.Fatal(err)
	}
	// lock_timeout turns a wait for the producer's lock into an error
	// (55P03) instead of a hang, whatever the machine's speed.
	conn, err := d.pool.Acquire(testsupport.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(testsupport.Context(t, long), "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET lock_timeout")
	if err := ldpgx.CreateTable(testsupport.Context(t, long), conn, d.table); err != nil {
		t.Fatalf("CreateTable on an existing table with a writer's transaction open: %v; want nil, without waiting for its lock", err)
	}
}

// A table that does not exist is Fetch's error, with the fix; the
// listener's log says it too.
func TestFetchFromATableThatDoesNotExist(t *testing.T) {
	d := newDB(t)
	logs := new(testsupport.LogBuffer)
	missing := *d
	missing.table = strings.Split(d.table, ".")[0] + ".missing"
	src := missing.source(t, nil, ldpgx.SourceConfig{Logger: slogTo(logs)})
	_, err := src.Fetch(testsupport.Context(t, long), 0)
	if err == nil || !strings.Contains(err.Error(), "create the table with ldpgx.CreateTable") || !strings.HasPrefix(err.Error(), "lameduck: ") {
		t.Fatalf("Fetch from a missing table: %v; want an error with the fix", err)
	}
	if err := ldpgx.Enqueue(testsupport.Context(t, long), d.pool, missing.table, ldpgx.EnqueueJob{}); err == nil || !strings.Contains(err.Error(), "create the table with ldpgx.CreateTable") {
		t.Fatalf("Enqueue to a missing table: %v; want an error with the fix", err)
	}
	waitLog(t, logs, "does not exist (create it with ldpgx.CreateTable)")
}
