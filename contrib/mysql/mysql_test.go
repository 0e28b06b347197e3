package ldmysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/lameduck/lameduck/checks"
	ldmysql "github.com/lameduck/lameduck/contrib/mysql"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// live returns the shared server's DSN, parsed, once it answers, or skips
// (fails under CI).
func live(t testing.TB) *mysql.Config {
	t.Helper()
	srv := testsupport.MySQL
	cfg, err := mysql.ParseDSN(srv.Addr())
	if err != nil {
		t.Fatalf("%s=%s: %v", srv.EnvVar, srv.Addr(), err)
	}
	db := open(t, cfg.FormatDSN())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		srv.Missing(t, err)
	}
	return cfg
}

func open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// The check, and the core's checks.SQLPing through the same driver,
// against the shared MariaDB; one connection serves every probe.
func TestCheckRealServer(t *testing.T) {
	db := open(t, live(t).FormatDSN())
	r := testsupport.Serve(t,
		ldmysql.Check(health.Check{Name: "db", Critical: true}, db),
		checks.SQLPing(health.Check{Name: "sqlping", Critical: true}, db))
	for range 5 {
		a := r.Probe(t)
		a.Want(t, "the shared MariaDB", 200, "ok", "db", "ok")
		a.Want(t, "the shared MariaDB", 200, "ok", "sqlping", "ok")
	}
	if n := db.Stats().OpenConnections; n > 2 {
		t.Fatalf("5 probes of 2 checks left %d connections open, want at most 2", n)
	}
}

// The shared MariaDB behind a proxy of the test's own: cut, stalled,
// restored.
func TestFaults(t *testing.T) {
	base := live(t)
	testsupport.ProxiedFaults(base.Addr, func(t testing.TB, name string, critical bool, addr string) health.Check {
		cfg := base.Clone()
		cfg.Addr = addr
		cfg.Timeout = 5 * time.Second
		// The harness sets the Timeout.
		return ldmysql.Check(health.Check{Name: name, Critical: critical}, open(t, cfg.FormatDSN()))
	}).Run(t)
}

// A wrong password: the server's "Access denied for user ..." reaches the
// body without the user, and the DSN's password never does; a server that
// went away is 503 failed for both the check and checks.SQLPing.
func TestErrorsRedacted(t *testing.T) {
	base := live(t)
	cfg := base.Clone()
	cfg.User, cfg.Passwd = "appuser", "hunter2"
	bad := open(t, cfg.FormatDSN())
	r := testsupport.Serve(t,
		ldmysql.Check(health.Check{Name: "db", Critical: true}, bad),
		checks.SQLPing(health.Check{Name: "sqlping", Critical: true}, open(t, "appuser:hunter2@tcp(127.0.0.1:1)/test?timeout=2s")))
	a := r.Probe(t)
	a.Want(t, "a wrong password", 503, "failed", "db", "error")
	a.Want(t, "nothing listens on port 1", 503, "failed", "sqlping", "error")
	for _, s := range []string{"appuser", "hunter2"} {
		if strings.Contains(a.Body, s) {
			t.Fatalf("%q reached the body: %s", s, a.Body)
		}
	}
	if !strings.Contains(a.Checks["db"], "Access denied") {
		t.Fatalf("the server's answer was lost: %q", a.Checks["db"])
	}
}

func TestNilDB(t *testing.T) {
	if ldmysql.Check(health.Check{Name: "db"}, nil).Func(context.Background()) == nil {
		t.Fatal("a nil db passed")
	}
}
