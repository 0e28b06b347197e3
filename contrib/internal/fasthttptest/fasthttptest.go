// Package fasthttptest holds the tests that every server the Lifecycle runs
// through ldfasthttp.ServerFuncs passes: the Fiber v2 and v3 apps of
// contrib/fiber and contrib/fiberv3. Each module's tests describe their app
// in a [Server] and call one function here per test, so the two modules
// assert the same things of the same routes, written once.
//
// The routes are handled on the request's *fasthttp.RequestCtx, which both
// Fiber versions hand a handler (v2's c.Context(), v3's c.RequestCtx()):
// what a test checks is the Lifecycle's tracking and drain, not the
// framework's own response helpers.
package fasthttptest

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

// VerifyTestMain runs m under goleak, as every package's TestMain does,
// ignoring two goroutines of fasthttp's own, not ours: its worker-pool
// cleaner notices that its server stopped only when it wakes, up to
// MaxIdleWorkerDuration (10s) later; and its process-wide Date-header
// ticker, started once on first use, runs for the life of the process.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

// Server is an integration's app, of type A, as the tests build it.
type Server[A any] struct {
	// Name names the framework in failure messages ("Fiber").
	Name string
	// New returns an app with the integration's middleware installed first,
	// tracking for lc; with a nil lc, an app without it.
	New func(lc *lameduck.Lifecycle) A
	// Handle adds a route: h serves method on path ("/*" for every path).
	Handle func(app A, method, path string, h fasthttp.RequestHandler)
	// AddServer is the integration's AddServer.
	AddServer func(lc *lameduck.Lifecycle, app A, addr string, ln net.Listener) error
	// NewRegistered is the integration's New: an app with the middleware,
	// registered with lc on addr.
	NewRegistered func(lc *lameduck.Lifecycle, addr string) (A, error)
	// Handler returns app's request handler, for the allocation tests.
	Handler func(app A) fasthttp.RequestHandler
}

// Rig is a testsupport.HTTPRig whose server under test is a Server's app,
// registered by its AddServer on a loopback listener.
type Rig[A any] struct {
	*testsupport.HTTPRig
	App A
	// NetHTTP is the URL of a net/http server on the same Lifecycle, when
	// asked for.
	NetHTTP string
}

// Rig returns a Lifecycle on a fake clock with s's app registered by
// AddServer on a loopback listener; routes (nil for none) adds the app's
// routes. withHTTP also registers a net/http server on the same Lifecycle.
// It does not start the Lifecycle.
func (s Server[A]) Rig(t *testing.T, cfg lameduck.Config, withHTTP bool, routes func(app A)) *Rig[A] {
	t.Helper()
	r := &Rig[A]{HTTPRig: testsupport.NewHTTPRig(t, cfg)}
	ln, base := testsupport.Listen(t)
	r.App = s.New(r.LC)
	if routes != nil {
		routes(r.App)
	}
	if err := s.AddServer(r.LC, r.App, "", ln); err != nil {
		t.Fatal(err)
	}
	r.Base = base
	if withHTTP {
		r.NetHTTP = r.AddNetHTTP(t)
	}
	return r
}

// blocking returns a handler that closes entered, waits for release, then
// answers body.
func blocking(entered, release chan struct{}, body string) fasthttp.RequestHandler {
	return func(fc *fasthttp.RequestCtx) {
		close(entered)
		<-release
		fc.SetBodyString(body)
	}
}

// answer returns a handler that answers body.
func answer(body string) fasthttp.RequestHandler {
	return func(fc *fasthttp.RequestCtx) { fc.SetBodyString(body) }
}

// ProbesAreByteIdenticalToNetHTTP asks the same questions of the probes on
// s's app and on a net/http server registered with the same Lifecycle, in
// every phase, and compares status, headers (all but Date) and bodies.
func ProbesAreByteIdenticalToNetHTTP[A any](t *testing.T, s Server[A]) {
	r := s.Rig(t, lameduck.Config{ShutdownDelay: 5 * time.Second, PreStop: true, PreStopToken: "t0ken", Version: "v1.2.3", Commit: "abc"}, true, nil)
	if err := r.LC.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := r.LC.AddCheck(health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("connection refused") }}); err != nil {
		t.Fatal(err)
	}
	c := testsupport.Client(t)
	compare := func(phase string) {
		t.Helper()
		testsupport.CompareProbes(t, c, s.Name, phase, r.Base, r.NetHTTP, testsupport.ProbeQuestions)
	}
	r.Start(t)
	compare("serving")
	r.LC.BeginShutdown("test")
	compare("draining")
	testsupport.Timers(t, r.Clk, 1)
	r.Clk.Advance(5 * time.Second)
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Drain: a request in flight at the signal completes with 200 while
// /readyz is 503 draining and /healthz 200 on the same listener; requests
// in the window are served with Connection: close; the teardown waits for
// the request, then Run returns nil.
func Drain[A any](t *testing.T, s Server[A]) {
	entered, release := make(chan struct{}), make(chan struct{})
	r := s.Rig(t, lameduck.Config{ShutdownDelay: 2 * time.Second, ShutdownTeardown: 10 * time.Second}, false, func(app A) {
		s.Handle(app, "GET", "/slow", blocking(entered, release, "slept"))
		s.Handle(app, "GET", "/", answer("hello"))
	})
	r.Start(t)
	testsupport.DrainServesInFlight(t, r.HTTPRig, s.Name, entered, release)
}

// StuckRequestIsCutAndNamed: a request that outlives the teardown budget is
// cut, named with method, path and age, and Run's error wraps
// context.DeadlineExceeded (a non-zero exit).
func StuckRequestIsCutAndNamed[A any](t *testing.T, s Server[A]) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	r := s.Rig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second}, false, func(app A) {
		// Ignores everything (fasthttp closes RequestCtx.Done() when the
		// teardown starts, so it is not watched here).
		s.Handle(app, "POST", "/stuck", blocking(entered, release, ""))
	})
	r.Start(t)
	testsupport.StuckRequestIsCut(t, r.HTTPRig, entered)
}

// rejectRig returns a started rig in reject mode (SendRetryAfter) whose
// GET /slow waits for release and GET /new answers at once.
func rejectRig[A any](t *testing.T, s Server[A], entered, release chan struct{}) *Rig[A] {
	r := s.Rig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true}, false, func(app A) {
		s.Handle(app, "GET", "/slow", blocking(entered, release, ""))
		s.Handle(app, "GET", "/new", answer(""))
	})
	r.Start(t)
	return r
}

// RejectMode: in reject mode a request in flight at the signal is served,
// and a new one in the teardown is refused 503 with Retry-After.
func RejectMode[A any](t *testing.T, s Server[A]) {
	entered, release := make(chan struct{}), make(chan struct{})
	r := rejectRig(t, s, entered, release)
	testsupport.WantRefusal(t, testsupport.RejectMode(t, r.HTTPRig, entered, release))
}

// ProbesAreNotApplicationRequests: probes through the middleware are not
// application requests, as on net/http (docs/probes-and-shutdown.md):
// asked all through an idle-drain window, they do not push its end past
// its minimum; and in reject mode, where new requests get 503, /healthz
// still answers 200 and /readyz 503 draining.
func ProbesAreNotApplicationRequests[A any](t *testing.T, s Server[A]) {
	t.Run("idle drain", func(t *testing.T) {
		r := s.Rig(t, lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: time.Second,
			IdleWindow: 2 * time.Second, DrainTimeout: 20 * time.Second}, false, nil)
		r.Start(t)
		testsupport.ProbesKeepIdleDrainShort(t, r.HTTPRig)
	})
	t.Run("reject mode", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		r := rejectRig(t, s, entered, release)
		testsupport.RejectMode(t, r.HTTPRig, entered, release)
	})
}

// Upgrades: a connection hijacked before the signal (as a WebSocket upgrade
// does) is tracked, and does not hold the drain once its handler closes it
// when the window ends; an upgrade asked for after the signal is refused
// 503 with Retry-After.
func Upgrades[A any](t *testing.T, s Server[A]) {
	r, conn := upgradeRig(t, s, nil)
	if got := r.LC.InFlight(); len(got) != 1 || !got[0].Hijacked || got[0].Path != "/ws" {
		t.Fatalf("InFlight = %+v; want the upgraded connection, hijacked", got)
	}
	r.LC.BeginShutdown("test")
	a := testsupport.Do(t, testsupport.Client(t), "GET", r.Base+"/ws", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"})
	if a.Code != 503 || a.Header.Get("Retry-After") != "1" || !strings.Contains(a.Body, "upgrade on another instance") {
		t.Fatalf("upgrade after the signal: %d %v %q", a.Code, a.Header, a.Body)
	}
	testsupport.Timers(t, r.Clk, 1)
	r.Clk.Advance(time.Second)
	wantGoodbye(t, conn)
	if err := r.Wait(); err != nil {
		t.Fatalf("Run = %v; the upgraded connection closed cleanly", err)
	}
}

// HijackedRequestKeepsItsName: an upgraded connection stays in flight after
// the framework has put its request context back in its pool, and requests
// for other paths reuse that context's buffers; the connection is still
// named GET /ws.
func HijackedRequestKeepsItsName[A any](t *testing.T, s Server[A]) {
	r, conn := upgradeRig(t, s, func(app A) { s.Handle(app, "GET", "/*", answer("ok")) })
	c := testsupport.Client(t)
	for i := range 40 {
		testsupport.Do(t, c, "GET", r.Base+[]string{"/zq", "/abcdefgh"}[i%2], nil)
	}
	if got := r.LC.InFlight(); len(got) != 1 || !got[0].Hijacked || got[0].Method != "GET" || got[0].Path != "/ws" {
		t.Fatalf("InFlight after other requests = %+v; want GET /ws, hijacked", got)
	}
	lameducktest.EndWindow(t, r.LC, r.Clk)
	wantGoodbye(t, conn)
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

// upgradeRig returns a started rig (ShutdownDelay 1s, ShutdownTeardown 5s)
// whose GET /ws switches protocols and hijacks the connection, writing
// "bye\n" when the window ends, and more's routes (nil for none); it opens
// the upgraded connection and waits until it is in flight, hijacked.
func upgradeRig[A any](t *testing.T, s Server[A], more func(app A)) (*Rig[A], net.Conn) {
	t.Helper()
	var r *Rig[A]
	r = s.Rig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app A) {
		s.Handle(app, "GET", "/ws", func(fc *fasthttp.RequestCtx) {
			fc.SetStatusCode(fasthttp.StatusSwitchingProtocols)
			fc.Response.Header.Set(fasthttp.HeaderUpgrade, "x-test")
			fc.Response.Header.Set(fasthttp.HeaderConnection, "Upgrade")
			fc.Hijack(func(conn net.Conn) {
				<-r.LC.Events().WindowEnded.Done()
				conn.Write([]byte("bye\n"))
			})
		})
		if more != nil {
			more(app)
		}
	})
	r.Start(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\n")
	testsupport.AwaitHijacked(t, r.LC)
	return r, conn
}

// wantGoodbye reads conn until the server closes it, and fails t unless it
// ends with the handler's "bye\n", or if that has not happened within
// testsupport.Guard (a hang guard).
func wantGoodbye(t *testing.T, conn net.Conn) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(testsupport.Guard)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the upgraded connection read %q, then %v; want EOF", b, err)
	}
	if !strings.HasSuffix(string(b), "bye\n") {
		t.Fatalf("the upgraded connection read %q; want its handler's goodbye, then EOF", b)
	}
}

// IdleAppStopsAtOnce: an app without requests in flight stops at once, and
// Run returns nil.
func IdleAppStopsAtOnce[A any](t *testing.T, s Server[A]) {
	r := s.Rig(t, lameduck.Config{ShutdownDelay: time.Second}, false, nil)
	r.Start(t)
	lameducktest.EndWindow(t, r.LC, r.Clk)
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

// NewRegistersTheApp: NewRegistered refuses an empty address, naming Addr;
// an app it made on an address runs and stops with the Lifecycle.
func NewRegistersTheApp[A any](t *testing.T, s Server[A]) {
	lc, _ := testsupport.NewLifecycle(t, lameduck.Config{})
	if _, err := s.NewRegistered(lc, ""); err == nil || !strings.Contains(err.Error(), "Addr") {
		t.Fatalf("New with no address: %v; want an error naming Addr", err)
	}
	app, err := s.NewRegistered(lc, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Handle(app, "GET", "/", answer(""))
	wait := lameducktest.Start(t, lc)
	lc.BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// trackedApp returns the handler of an app whose GET /api/orders answers
// 200, with the middleware when tracked.
func trackedApp[A any](s Server[A]) func(tb testing.TB, tracked bool) fasthttp.RequestHandler {
	return func(tb testing.TB, tracked bool) fasthttp.RequestHandler {
		var lc *lameduck.Lifecycle
		if tracked {
			var err error
			lc, err = lameduck.New(lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false }, IgnoreSignals: true})
			if err != nil {
				tb.Fatal(err)
			}
		}
		app := s.New(lc)
		s.Handle(app, "GET", "/api/orders", func(fc *fasthttp.RequestCtx) { fc.SetStatusCode(200) })
		return s.Handler(app)
	}
}

// requestCtx returns a reusable fasthttp request for the allocation tests.
func requestCtx(path string) *fasthttp.RequestCtx {
	var fc fasthttp.RequestCtx
	fc.Request.Header.SetMethod("GET")
	fc.Request.SetRequestURI(path)
	return &fc
}

// MiddlewareAllocatesNothing: a request through the app with the middleware
// allocates no more than one through the app without it. It skips under
// the race detector, which makes sync.Pool drop records.
func MiddlewareAllocatesNothing[A any](t *testing.T, s Server[A]) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop records: allocation counts are meaningless")
	}
	app := trackedApp(s)
	bare, tracked := app(t, false), app(t, true)
	fc := requestCtx("/api/orders")
	testsupport.NoExtraAllocs(t, "a "+s.Name+" request", func() { bare(fc) }, func() { tracked(fc) })
}

// BenchMiddleware runs a request through the app's handler with and without
// the middleware; compare the two with benchstat.
func BenchMiddleware[A any](b *testing.B, s Server[A]) {
	testsupport.BenchBareAndTracked(b, trackedApp(s), func(h fasthttp.RequestHandler) func() {
		fc := requestCtx("/api/orders")
		return func() { h(fc) }
	})
}

// Contexts answers a request on fc with the contexts its handler can
// reach, each by its name.
type Contexts func(fc *fasthttp.RequestCtx, contexts map[string]context.Context)

// EveryContextLivesThroughTheTeardown passes every context a handler of
// s's app can reach to a 1s PostgreSQL query (pg_sleep, which pgx cancels
// on the server when its context ends) started 100ms before SIGTERM (the
// test signals its own process, as the kubelet would), with no lame-duck
// window: the teardown begins at the signal, and each query must still
// run to its end, its handler answering 200 with the query's result
// (testsupport.SignalDuringQueries). names names the contexts; route adds
// GET path to the app, whose handler calls answer with its request and
// the contexts by those names. The query runs on the context the request's
// ctx parameter names.
func EveryContextLivesThroughTheTeardown[A any](t *testing.T, s Server[A], names []string, route func(app A, path string, answer Contexts)) {
	t.Helper()
	pool := livePool(t, len(names))
	started := make(chan string, len(names))
	// A Lifecycle of its own that listens to the process's signals, on the
	// real clock.
	lc := testsupport.SignalledLifecycle(t, 30*time.Second)
	app := s.New(lc)
	route(app, "/query", func(fc *fasthttp.RequestCtx, contexts map[string]context.Context) {
		name := string(fc.QueryArgs().Peek("ctx"))
		ctx, ok := contexts[name]
		if !ok {
			fc.Error("ctx="+name, 400)
			return
		}
		started <- name
		var got string
		if err := pool.QueryRow(ctx, "SELECT $1::text FROM pg_sleep(1)", name).Scan(&got); err != nil {
			fc.Error(err.Error(), 500)
			return
		}
		fc.SetBodyString(got)
	})
	ln, base := testsupport.Listen(t)
	if err := s.AddServer(lc, app, "", ln); err != nil {
		t.Fatal(err)
	}
	testsupport.SignalDuringQueries(t, lc, base, names, started)
}

// livePool returns a pool on the shared PostgreSQL with n connections open,
// or skips (fails under CI) when it does not answer: for the tests that
// pass a query every context a handler can reach.
func livePool(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	srv := testsupport.Postgres
	pool, err := pgxpool.New(context.Background(), srv.Addr())
	if err != nil {
		t.Fatalf("%s=%s: %v", srv.EnvVar, srv.Addr(), err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, 0, n)
	for range n { // dialled now, so no query waits for a connect
		c, err := pool.Acquire(ctx)
		if err != nil {
			srv.Missing(t, err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool
}
