package ldpgx_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
)

// A check of the database every replica shares, so not critical: while
// PostgreSQL does not answer, /readyz is 200 "degraded" and names "db",
// instead of failing readiness on every pod at once and emptying the
// Service (docs/probes-and-shutdown.md, "When a check should be critical").
// The pool is closed after the background join, so no write meets a closed
// pool.
func ExampleCheck() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL")) // connects lazily
	if err != nil {
		log.Fatal(err)
	}
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := lc.AddCheck(ldpgx.Check(health.Check{Name: "db"}, pool)); err != nil {
		log.Fatal(err)
	}
	_ = lc.AddCloser("postgres", func(context.Context) error { pool.Close(); return nil })
}

// A runner on a PostgreSQL jobs table: the table is created at startup
// (safe from every replica at once), four loops share one Source (four
// jobs at once), and the pool is closed after the drain (the closers run
// last). A producer enqueues inside its own transaction: the job exists,
// and the runners are notified, only if the transaction commits.
func ExampleNewSource() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // size it: pool_max_conns ≥ loops + 2
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(worker.Config{}) // LAMEDUCK_* fill the rest: probes on :9090, the drain's bound
	if err != nil {
		log.Fatal(err) // names the variable, its value and the fix
	}
	_ = w.Lifecycle().AddStartupTask("jobs table", func(ctx context.Context) error {
		return ldpgx.CreateTable(ctx, pool, "jobs")
	})
	_ = w.Lifecycle().AddCloser("postgres", func(context.Context) error { pool.Close(); return nil })
	src, err := ldpgx.NewSource(pool, ldpgx.SourceConfig{Table: "jobs", Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err) // a malformed setting, named with its fix
	}
	for i := range 4 {
		err := w.AddLoop(worker.Loop{Name: fmt.Sprintf("jobs-%d", i), Source: src,
			Handle: func(ctx context.Context, job worker.Job) error {
				j := job.(*ldpgx.Job)
				return process(ctx, j.Payload()) // nil: the row is deleted; an error: handed back, counted
			}})
		if err != nil {
			log.Fatal(err)
		}
	}

	// A producer, elsewhere: the job and the order commit together.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// ... the producer's own writes on tx ...
	if err := ldpgx.Enqueue(ctx, tx, "jobs", ldpgx.EnqueueJob{Key: "invoice-42", Payload: []byte(`{"order":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	if err := w.Run(ctx); err != nil { // SIGTERM drains it: each job finishes or is handed back
		os.Exit(1)
	}
}

// process is the example's handler.
func process(context.Context, []byte) error { return nil }
