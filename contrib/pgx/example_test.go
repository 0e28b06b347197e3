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

// A critical check of the database the pod cannot serve without: while
// PostgreSQL does not answer, /readyz is 503 "failed" and names "db". The
// pool is closed after the background join, so no write meets a closed
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
	if err := lc.AddCheck(ldpgx.Check(health.Check{Name: "db", Critical: true}, pool)); err != nil {
		log.Fatal(err)
	}
	_ = lc.AddCloser("postgres", func(context.Context) error { pool.Close(); return nil })
}
