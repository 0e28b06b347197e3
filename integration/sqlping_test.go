package integration

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/checks"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/lameducktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type server struct {
	driver, envVar, dsn, start string
}

var (
	postgres = server{"pgx", "LAMEDUCK_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"}
	mariadb = server{"mysql", "LAMEDUCK_TEST_MARIADB_DSN", "root@tcp(127.0.0.1:3306)/test",
		"start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"}
)

// open returns a pool to s that answers a ping, or skips (fails under CI).
func open(t *testing.T, s server) *sql.DB {
	t.Helper()
	dsn := s.dsn
	if v := os.Getenv(s.envVar); v != "" {
		dsn = v
	}
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		t.Fatalf("sql.Open(%s): %v", s.driver, err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		msg := s.driver + " server unreachable (" + err.Error() + "); set " + s.envVar + " or start it: " + s.start
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return db
}

// readyz answers /readyz of a serving Lifecycle with the given checks.
func readyz(t *testing.T, cks ...health.Check) (int, string) {
	t.Helper()
	lc, clk := lameducktest.New(t, lameduck.Config{ShutdownDelay: time.Second})
	for _, c := range cks {
		if err := lc.AddCheck(c); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, ln)
	wait := lameducktest.Start(t, lc)
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	lameducktest.EndWindow(t, lc, clk)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	return rec.Code, rec.Body.String()
}

func TestSQLPingRealServers(t *testing.T) {
	for _, s := range []server{postgres, mariadb} {
		t.Run(s.driver, func(t *testing.T) {
			db := open(t, s)
			code, body := readyz(t, health.Check{Name: "db", Critical: true, Func: checks.SQLPing(db)})
			if code != 200 || !strings.Contains(body, `"db":"ok"`) {
				t.Fatalf("/readyz against a live %s: %d %s", s.driver, code, body)
			}
		})
	}
}

// A database that goes away: the pool's server closes (a private port that
// stops listening), and the critical check turns /readyz 503 "failed"
// without leaking the password of the DSN into the body.
func TestSQLPingDatabaseDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	for _, tc := range []struct{ driver, dsn string }{
		{"pgx", "postgres://app:hunter2@" + addr + "/test?sslmode=disable&connect_timeout=2"},
		{"mysql", "app:hunter2@tcp(" + addr + ")/test?timeout=2s"},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			db, err := sql.Open(tc.driver, tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			code, body := readyz(t,
				health.Check{Name: "db", Critical: true, Func: checks.SQLPing(db)},
				health.Check{Name: "cache", Func: func(context.Context) error { return nil }})
			if code != 503 || !strings.Contains(body, `"status":"failed"`) || !strings.Contains(body, `"db":"error:`) {
				t.Fatalf("/readyz with the database down: %d %s", code, body)
			}
			if strings.Contains(body, "hunter2") {
				t.Fatalf("the DSN's password reached the body: %s", body)
			}
		})
	}
}
