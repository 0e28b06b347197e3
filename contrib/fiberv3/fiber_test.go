package ldfiberv3_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/lameduck/lameduck"
	ldfiberv3 "github.com/lameduck/lameduck/contrib/fiberv3"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Two goroutines of fasthttp's own, not ours: its worker-pool cleaner
	// notices that its server stopped only when it wakes, up to
	// MaxIdleWorkerDuration (10s) later; and its process-wide Date-header
	// ticker, started once on first use, runs for the life of the process.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

// rig is a testsupport.HTTPRig whose server under test is a Fiber app
// registered by ldfiberv3.AddServer on a loopback listener.
type rig struct {
	*testsupport.HTTPRig
	t     *testing.T
	app   *fiber.App
	httpB string // a net/http server's URL on the same Lifecycle, when asked for
}

// newRig returns a Lifecycle on a fake clock with a Fiber app registered
// by ldfiberv3.AddServer on a loopback listener; routes adds the app's
// routes. withHTTP also registers a net/http server on the same Lifecycle.
func newRig(t *testing.T, cfg lameduck.Config, withHTTP bool, routes func(app *fiber.App)) *rig {
	t.Helper()
	r := &rig{HTTPRig: testsupport.NewHTTPRig(t, cfg), t: t}
	ln, base := testsupport.Listen(t)
	r.app = fiber.New()
	r.app.Use(ldfiberv3.Middleware(r.LC))
	if routes != nil {
		routes(r.app)
	}
	if err := ldfiberv3.AddServer(r.LC, r.app, "", ln); err != nil {
		t.Fatal(err)
	}
	r.Base = base
	if withHTTP {
		r.httpB = r.AddNetHTTP(t)
	}
	return r
}

func (r *rig) start() { r.Start(r.t) }

// readToEOF reads conn until the server closes it, failing t if that has
// not happened within testsupport.Guard (a hang guard).
func readToEOF(t *testing.T, conn net.Conn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(testsupport.Guard)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the upgraded connection read %q, then %v; want EOF", b, err)
	}
	return string(b)
}

// TestProbesAreByteIdenticalToNetHTTP asks the same questions of the probes
// on a Fiber app and on a net/http server registered with the same
// Lifecycle, in every phase, and compares status, headers (all but Date)
// and bodies.
func TestProbesAreByteIdenticalToNetHTTP(t *testing.T) {
	r := newRig(t, lameduck.Config{ShutdownDelay: 5 * time.Second, PreStop: true, PreStopToken: "t0ken", Version: "v1.2.3", Commit: "abc"}, true, nil)
	if err := r.LC.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := r.LC.AddCheck(health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("connection refused") }}); err != nil {
		t.Fatal(err)
	}
	c := testsupport.Client(t)
	compare := func(phase string) {
		t.Helper()
		testsupport.CompareProbes(t, c, "Fiber", phase, r.Base, r.httpB, testsupport.ProbeQuestions)
	}
	r.start()
	compare("serving")
	r.LC.BeginShutdown("test")
	compare("draining")
	testsupport.Timers(t, r.Clk, 1)
	r.Clk.Advance(5 * time.Second)
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestDrainOnFiber: a request in flight at the signal completes with 200
// while /readyz is 503 draining and /healthz 200 on the same listener;
// requests in the window are served with Connection: close; the teardown
// waits for the request, then Run returns nil.
func TestDrainOnFiber(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	r := newRig(t, lameduck.Config{ShutdownDelay: 2 * time.Second, ShutdownTeardown: 10 * time.Second}, false, func(app *fiber.App) {
		app.Get("/slow", func(c fiber.Ctx) error {
			close(entered)
			<-release
			return c.SendString("slept")
		})
		app.Get("/", func(c fiber.Ctx) error { return c.SendString("hello") })
	})
	r.start()
	testsupport.DrainServesInFlight(t, r.HTTPRig, "Fiber", entered, release)
}

// TestStuckRequestIsCutAndNamed: a request that outlives the teardown
// budget is cut, named with method, path and age, and Run's error wraps
// context.DeadlineExceeded (a non-zero exit).
func TestStuckRequestIsCutAndNamed(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	r := newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second}, false, func(app *fiber.App) {
		app.Post("/stuck", func(c fiber.Ctx) error {
			close(entered)
			// Ignores everything (fasthttp closes RequestCtx.Done() when
			// the teardown starts, so it is not watched here).
			<-release
			return nil
		})
	})
	r.start()
	testsupport.StuckRequestIsCut(t, r.HTTPRig, entered)
}

func TestRejectModeOnFiber(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	r := newRig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true}, false, func(app *fiber.App) {
		app.Get("/slow", func(c fiber.Ctx) error { close(entered); <-release; return nil })
		app.Get("/new", func(c fiber.Ctx) error { return nil })
	})
	r.start()
	testsupport.WantRefusal(t, testsupport.RejectMode(t, r.HTTPRig, entered, release))
}

// TestUpgradesOnFiber: a connection hijacked before the signal (as a
// WebSocket upgrade does) is tracked, does not hold the drain once its
// handler closes it when the window ends; an upgrade asked for after the
// signal is refused 503 with Retry-After.
func TestUpgradesOnFiber(t *testing.T) {
	r, conn := upgradeRig(t, nil)
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
	if b := readToEOF(t, conn); !strings.HasSuffix(b, "bye\n") {
		t.Fatalf("the upgraded connection read %q; want its handler's goodbye, then EOF", b)
	}
	if err := r.Wait(); err != nil {
		t.Fatalf("Run = %v; the upgraded connection closed cleanly", err)
	}
}

// TestHijackedRequestKeepsItsName: an upgraded connection stays in flight
// after Fiber has put its Ctx back in the pool, and requests for other
// paths reuse that Ctx's buffers; the connection is still named GET /ws.
func TestHijackedRequestKeepsItsName(t *testing.T) {
	r, conn := upgradeRig(t, func(app *fiber.App) {
		app.Get("/*", func(c fiber.Ctx) error { return c.SendString("ok") })
	})
	c := testsupport.Client(t)
	for i := range 40 {
		testsupport.Do(t, c, "GET", r.Base+[]string{"/zq", "/abcdefgh"}[i%2], nil)
	}
	if got := r.LC.InFlight(); len(got) != 1 || !got[0].Hijacked || got[0].Method != "GET" || got[0].Path != "/ws" {
		t.Fatalf("InFlight after other requests = %+v; want GET /ws, hijacked", got)
	}
	lameducktest.EndWindow(t, r.LC, r.Clk)
	if b := readToEOF(t, conn); !strings.HasSuffix(b, "bye\n") {
		t.Fatalf("the upgraded connection read %q; want its handler's goodbye, then EOF", b)
	}
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

// upgradeRig returns a started rig (ShutdownDelay 1s, ShutdownTeardown 5s)
// whose GET /ws switches protocols and hijacks the connection, writing
// "bye\n" when the window ends, and more's routes (nil for none); it opens
// the upgraded connection and waits until it is in flight, hijacked.
func upgradeRig(t *testing.T, more func(app *fiber.App)) (*rig, net.Conn) {
	t.Helper()
	var r *rig
	r = newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/ws", func(c fiber.Ctx) error {
			c.Status(fiber.StatusSwitchingProtocols)
			c.Set(fiber.HeaderUpgrade, "x-test")
			c.Set(fiber.HeaderConnection, "Upgrade")
			c.RequestCtx().Hijack(func(conn net.Conn) {
				<-r.LC.WindowEnded()
				conn.Write([]byte("bye\n"))
			})
			return nil
		})
		if more != nil {
			more(app)
		}
	})
	r.start()
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\n")
	testsupport.AwaitHijacked(t, r.LC)
	return r, conn
}

// TestHandlerRunsWithoutTheMiddleware: a Fiber app without requests in
// flight stops at once, and Run returns nil.
func TestIdleAppStopsAtOnce(t *testing.T) {
	r := newRig(t, lameduck.Config{ShutdownDelay: time.Second}, false, nil)
	r.start()
	lameducktest.EndWindow(t, r.LC, r.Clk)
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRegistersTheApp(t *testing.T) {
	lc, _ := testsupport.NewLifecycle(t, lameduck.Config{})
	if _, err := ldfiberv3.New(lc, ""); err == nil || !strings.Contains(err.Error(), "Addr") {
		t.Fatalf("New with no address: %v; want an error naming Addr", err)
	}
	app, err := ldfiberv3.New(lc, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app.Get("/", func(c fiber.Ctx) error { return nil })
	wait := lameducktest.Start(t, lc)
	lc.BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// requestCtx returns a reusable fasthttp request for the allocation tests.
func requestCtx(path string) *fasthttp.RequestCtx {
	var fc fasthttp.RequestCtx
	fc.Request.Header.SetMethod("GET")
	fc.Request.SetRequestURI(path)
	return &fc
}

func trackedApp(tb testing.TB, tracked bool) fasthttp.RequestHandler {
	lc, err := lameduck.New(lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false }, IgnoreSignals: true})
	if err != nil {
		tb.Fatal(err)
	}
	app := fiber.New()
	if tracked {
		app.Use(ldfiberv3.Middleware(lc))
	}
	app.Get("/api/orders", func(c fiber.Ctx) error { return c.SendStatus(200) })
	return app.Handler()
}

func TestMiddlewareAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop records: allocation counts are meaningless")
	}
	bare, tracked := trackedApp(t, false), trackedApp(t, true)
	fc := requestCtx("/api/orders")
	testsupport.NoExtraAllocs(t, "a Fiber request", func() { bare(fc) }, func() { tracked(fc) })
}

// BenchmarkMiddleware runs a Fiber request through app.Handler() with and
// without the middleware; compare the two with benchstat.
func BenchmarkMiddleware(b *testing.B) {
	testsupport.BenchBareAndTracked(b, trackedApp, func(h fasthttp.RequestHandler) func() {
		fc := requestCtx("/api/orders")
		return func() { h(fc) }
	})
}

// Stream counts the streamed body in flight, under the request's method
// and path, until its writer returns: the teardown waits for it, and the
// stream ends with its final event when the window ends.
func TestStreamIsTracked(t *testing.T) {
	var r *rig
	r = newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/events", func(c fiber.Ctx) error {
			ldfiberv3.Stream(r.LC, c, func(w *bufio.Writer) {
				w.WriteString("data: hello\n\n")
				if w.Flush() != nil {
					return
				}
				<-r.LC.WindowEnded()
				w.WriteString("event: bye\n\n")
			})
			return nil
		})
	})
	r.start()
	testsupport.StreamIsTracked(t, r.HTTPRig)
}
