package checks_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck/checks"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listen starts a loopback TCP listener that greets each connection with
// "+", closes it, and signals on accepted; it is closed and joined at
// cleanup. stop closes it to simulate a server that went away, with its
// port still held (testsupport.TCPServer): a dial is refused, and never
// answered by another process that took the port.
func listen(t *testing.T) (addr string, accepted <-chan struct{}, stop func()) {
	t.Helper()
	ch := make(chan struct{}, 64)
	addr, stop = testsupport.TCPServer(t, func(c net.Conn) {
		c.Write([]byte("+"))
		c.Close()
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return addr, ch, stop
}

// waitAccepted fails the test unless the server accepted a connection.
func waitAccepted(t *testing.T, accepted <-chan struct{}) {
	t.Helper()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the server accepted no connection")
	}
}

func TestTCPDial(t *testing.T) {
	addr, accepted, stop := listen(t)
	check := checks.TCPDial(health.Check{}, addr).Func
	if err := check(t.Context()); err != nil {
		t.Fatalf("dial a listening port: %v", err)
	}
	waitAccepted(t, accepted)
	stop()
	if err := check(t.Context()); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial a closed port: %v, want connection refused", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := check(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ctx: %v", err)
	}
	if err := checks.TCPDial(health.Check{}, "no-port").Func(t.Context()); err == nil || !strings.HasPrefix(err.Error(), `lameduck: checks.TCPDial("no-port")`) {
		t.Fatalf("malformed addr: %v", err)
	}
}

func TestHTTPGet(t *testing.T) {
	release := make(chan struct{})
	var followed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(strings.Repeat("x", 100<<10)))
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/redirect":
			http.Redirect(w, r, "/target", http.StatusFound)
		case "/target":
			followed.Store(true)
			w.WriteHeader(http.StatusInternalServerError)
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/missing":
			http.NotFound(w, r)
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(release)

	for path, want := range map[string]string{
		"/ok": "", "/nocontent": "", "/redirect": "",
		"/down":    "lameduck: GET " + srv.URL + "/down: 503 Service Unavailable",
		"/missing": "lameduck: GET " + srv.URL + "/missing: 404 Not Found",
	} {
		err := checks.HTTPGet(health.Check{}, srv.URL+path, nil).Func(t.Context())
		if (err == nil) != (want == "") || (err != nil && err.Error() != want) {
			t.Errorf("GET %s: %v, want %q", path, err, want)
		}
	}
	if followed.Load() {
		t.Error("the default client followed a redirect; a 3xx is the answer")
	}
	// A client of the caller's own, redirect policy included.
	if err := checks.HTTPGet(health.Check{}, srv.URL+"/redirect", srv.Client()).Func(t.Context()); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("GET /redirect with a following client: %v, want the target's 500", err)
	}
	// The check honours ctx.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := checks.HTTPGet(health.Check{}, srv.URL+"/hang", nil).Func(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("GET /hang: %v after %v, want the ctx deadline", err, time.Since(start))
	}
	for _, bad := range []string{"::", "/relative", "ftp://host/x"} {
		if err := checks.HTTPGet(health.Check{}, bad, nil).Func(t.Context()); err == nil || !strings.HasPrefix(err.Error(), "lameduck: checks.HTTPGet(") {
			t.Errorf("HTTPGet(%q): %v", bad, err)
		}
	}
	if err := checks.HTTPGet(health.Check{}, "ftp://u:pw@host/x", nil).Func(t.Context()); err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("the password of a rejected URL must not be in its error: %v", err)
	}
}

func TestDNSLookup(t *testing.T) {
	if err := checks.DNSLookup(health.Check{}, "localhost", nil).Func(t.Context()); err != nil {
		t.Fatalf("lookup localhost: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := checks.DNSLookup(health.Check{}, "lameduck-test.invalid", nil).Func(ctx); err == nil {
		t.Fatal("a lookup under a canceled ctx succeeded")
	}
	if err := checks.DNSLookup(health.Check{}, "", nil).Func(t.Context()); err == nil || !strings.HasPrefix(err.Error(), "lameduck:") {
		t.Fatalf("empty host: %v", err)
	}
	r := &net.Resolver{PreferGo: true}
	if err := checks.DNSLookup(health.Check{}, "localhost", r).Func(t.Context()); err != nil {
		t.Fatalf("lookup localhost with the Go resolver: %v", err)
	}
}

// A database/sql driver whose Ping dials a loopback server, so SQLPing is
// tested against a real socket without a database driver dependency.
type dialConnector struct{ addr string }

func (c dialConnector) Connect(context.Context) (driver.Conn, error) {
	return &dialConn{addr: c.addr}, nil
}
func (c dialConnector) Driver() driver.Driver { return nil }

type dialConn struct{ addr string }

func (c *dialConn) Ping(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return driver.ErrBadConn // database/sql retries, then reports it
	}
	defer conn.Close()
	var greeting [1]byte
	if _, err := io.ReadFull(conn, greeting[:]); err != nil || greeting[0] != '+' {
		return driver.ErrBadConn
	}
	return nil
}
func (c *dialConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (c *dialConn) Close() error                        { return nil }
func (c *dialConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }

func TestSQLPing(t *testing.T) {
	addr, accepted, stop := listen(t)
	db := sql.OpenDB(dialConnector{addr: addr})
	check := checks.SQLPing(health.Check{}, db).Func
	if err := check(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	waitAccepted(t, accepted)
	stop()
	if err := check(t.Context()); err == nil {
		t.Fatal("ping of a stopped server succeeded")
	}
	db.Close()
	if err := check(t.Context()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("ping of a closed pool: %v", err)
	}
	if err := checks.SQLPing(health.Check{}, nil).Func(t.Context()); err == nil || !strings.HasPrefix(err.Error(), "lameduck: checks.SQLPing(nil)") {
		t.Fatalf("nil db: %v", err)
	}
}

// Every constructor returns the spec it was given with its Func set: the
// name, criticality and timings the caller chose are kept, and a Func the
// spec held is replaced.
func TestConstructorsKeepTheSpec(t *testing.T) {
	old := errors.New("the spec's own Func")
	spec := health.Check{Name: "dep", Critical: true, Timeout: 3 * time.Second, MaxAge: 2 * time.Second, Refresh: true,
		Func: func(context.Context) error { return old }}
	for name, got := range map[string]health.Check{
		"TCPDial":   checks.TCPDial(spec, "no-port"),
		"HTTPGet":   checks.HTTPGet(spec, "not a url", nil),
		"DNSLookup": checks.DNSLookup(spec, "", nil),
		"SQLPing":   checks.SQLPing(spec, nil),
	} {
		if got.Name != spec.Name || got.Critical != spec.Critical || got.Timeout != spec.Timeout ||
			got.MaxAge != spec.MaxAge || got.Refresh != spec.Refresh {
			t.Errorf("%s: %+v, want the spec's fields %+v", name, got, spec)
		}
		if err := got.Func(t.Context()); err == nil || errors.Is(err, old) {
			t.Errorf("%s: Func returned %v, want the constructor's own error for its bad argument", name, err)
		}
	}
}
