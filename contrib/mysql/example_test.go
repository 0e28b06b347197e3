package ldmysql_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/go-sql-driver/mysql"
	"github.com/lameduck/lameduck"
	ldmysql "github.com/lameduck/lameduck/contrib/mysql"
	"github.com/lameduck/lameduck/health"
)

// A check of the database every replica shares, so not critical: while
// MariaDB does not answer, /readyz is 200 "degraded" and names "db" instead
// of emptying the Service (docs/probes-and-shutdown.md, "When a check should
// be critical"). timeout=2s bounds a dial.
func ExampleCheck() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app?timeout=2s")
	if err != nil {
		log.Fatal(err)
	}
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := lc.AddCheck(ldmysql.Check(health.Check{Name: "db"}, db)); err != nil {
		log.Fatal(err)
	}
	_ = lc.AddCloser("mysql", func(context.Context) error { return db.Close() })
}
