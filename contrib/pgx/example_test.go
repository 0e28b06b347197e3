package ldpgx_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/health"
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
