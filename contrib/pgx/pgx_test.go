package ldpgx_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/lameduck/lameduck/checks"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// live returns the shared server's DSN once it answers, or skips (fails
// under CI).
func live(t testing.TB) string {
	t.Helper()
	srv := testsupport.Postgres
	pool, err := pgxpool.New(context.Background(), srv.Addr())
	if err != nil {
		t.Fatalf("%s=%s: %v", srv.EnvVar, srv.Addr(), err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		srv.Missing(t, err)
	}
	return srv.Addr()
}

func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestCheckRealServer(t *testing.T) {
	pool := newPool(t, live(t))
	r := testsupport.Serve(t, ldpgx.Check(health.Check{Name: "db", Critical: true}, pool))
	r.Probe(t).Want(t, "the shared PostgreSQL", 200, "ok", "db", "ok")
	// One connection serves every probe: none is dialled per probe.
	for range 5 {
		r.Probe(t).Want(t, "the shared PostgreSQL", 200, "ok", "db", "ok")
	}
	if n := pool.Stat().NewConnsCount(); n != 1 {
		t.Fatalf("6 probes opened %d connections, want 1", n)
	}
}

// The shared PostgreSQL behind a proxy of the test's own: cut, then
// stalled, and restored; the server itself is never touched.
func TestFaults(t *testing.T) {
	dsn := live(t)
	testsupport.ProxiedFaults("127.0.0.1:5432", func(t testing.TB, name string, critical bool, addr string) health.Check {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = addr
		// As the package doc advises: without it, pgx's background
		// connects to a stalled server never end. It also bounds the
		// connects that must succeed (the first probe's, the one after
		// the outage), so it leaves a loaded machine seconds.
		q := u.Query()
		q.Set("connect_timeout", "5")
		u.RawQuery = q.Encode()
		// The harness sets the Timeout.
		return ldpgx.Check(health.Check{Name: name, Critical: critical}, newPool(t, u.String()))
	}).Run(t)
}

// The password of the DSN never reaches a body; the user name does: it is
// no secret, and it says which role could not connect.
func TestErrorsRedacted(t *testing.T) {
	pool := newPool(t, "host=127.0.0.1 port=1 user=appuser password=hunter2 dbname=test sslmode=disable connect_timeout=2")
	r := testsupport.Serve(t, ldpgx.Check(health.Check{Name: "db", Critical: true}, pool))
	a := r.Probe(t)
	a.Want(t, "nothing listens on port 1", 503, "failed", "db", "error")
	if strings.Contains(a.Body, "hunter2") {
		t.Fatalf("the password reached the body: %s", a.Body)
	}
	if !strings.Contains(a.Body, "user=appuser") {
		t.Fatalf("the user name is missing from the body (it is no secret): %s", a.Body)
	}
	// The check's own error, before the health engine's redaction.
	err := ldpgx.Check(health.Check{Name: "db"}, pool).Func(context.Background())
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "user=appuser") {
		t.Fatalf("the check's error = %v; want user=appuser and no password", err)
	}
}

// A service on database/sql uses the core's checks.SQLPing through pgx's
// stdlib driver: against the shared server, and against one that is gone
// (without its credentials in the body).
func TestSQLPingThroughStdlib(t *testing.T) {
	open := func(dsn string) *sql.DB {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	r := testsupport.Serve(t,
		checks.SQLPing(health.Check{Name: "live", Critical: true}, open(live(t))),
		checks.SQLPing(health.Check{Name: "gone"}, open("postgres://appuser:hunter2@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")))
	a := r.Probe(t)
	a.Want(t, "the shared server", 200, "degraded", "live", "ok")
	a.Want(t, "nothing listens on port 1", 200, "degraded", "gone", "error")
	if strings.Contains(a.Body, "hunter2") {
		t.Fatalf("the password reached the body: %s", a.Body)
	}
}

func TestNilPool(t *testing.T) {
	if ldpgx.Check(health.Check{Name: "db"}, nil).Func(context.Background()) == nil {
		t.Fatal("a nil pool passed")
	}
}
