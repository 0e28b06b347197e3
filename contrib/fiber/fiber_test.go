package ldfiber_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	fiberws "github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck"
	ldfiber "github.com/lameduck/lameduck/contrib/fiber"
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

type rig struct {
	t     *testing.T
	lc    *lameduck.Lifecycle
	clk   *lameducktest.Clock
	logs  *testsupport.LogBuffer
	app   *fiber.App
	base  string // the Fiber app's URL
	wait  func() error
	httpB string // a net/http server's URL on the same Lifecycle, when asked for
}

// newRig returns a Lifecycle on a fake clock with a Fiber app registered
// by ldfiber.New on a loopback listener; routes adds the app's
// routes. withHTTP also registers a net/http server on the same Lifecycle.
func newRig(t *testing.T, cfg lameduck.Config, withHTTP bool, routes func(app *fiber.App)) *rig {
	t.Helper()
	r := &rig{t: t, logs: &testsupport.LogBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	if cfg.CheckTimeout == 0 {
		// Checks that answer at once still answer "ok" or "error", not
		// "timeout", when a loaded machine delays a ping past 1s.
		cfg.CheckTimeout = testsupport.Timeout
	}
	r.lc, r.clk = lameducktest.New(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.app = fiber.New(fiber.Config{DisableStartupMessage: true})
	r.app.Use(ldfiber.Middleware(r.lc))
	if routes != nil {
		routes(r.app)
	}
	if err := ldfiber.AddServer(r.lc, r.app, "", ln); err != nil {
		t.Fatal(err)
	}
	r.base = "http://" + ln.Addr().String()
	if withHTTP {
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, hl); err != nil {
			t.Fatal(err)
		}
		r.httpB = "http://" + hl.Addr().String()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", r.logs)
		}
	})
	return r
}

func (r *rig) start() { r.wait = lameducktest.Start(r.t, r.lc) }

func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// stamps are the only bytes allowed to differ between two probe answers
// taken a moment apart: a check result's observation time.
var stamps = regexp.MustCompile(`"time":"[^"]*"`)

// TestProbesAreByteIdenticalToNetHTTP asks the same questions of the probes
// on a Fiber app and on a net/http server registered with the same
// Lifecycle, in every phase, and compares status, headers (all but Date)
// and bodies.
func TestProbesAreByteIdenticalToNetHTTP(t *testing.T) {
	r := newRig(t, lameduck.Config{ShutdownDelay: 5 * time.Second, PreStop: true, PreStopToken: "t0ken", Version: "v1.2.3", Commit: "abc"}, true, nil)
	if err := r.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := r.lc.AddCheck(health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("connection refused") }}); err != nil {
		t.Fatal(err)
	}
	c := client(t)
	type q struct {
		method, path string
		hdr          map[string]string
	}
	healthJSON := map[string]string{"Accept": "application/health+json"}
	questions := []q{
		{"GET", "/healthz", nil}, {"HEAD", "/healthz", nil}, {"POST", "/healthz", nil},
		{"GET", "/startupz", nil}, {"GET", "/readyz", nil}, {"HEAD", "/readyz", nil}, {"DELETE", "/readyz", nil},
		{"GET", "/readyz?verbose", nil}, {"GET", "/readyz?verbose=1&exclude=cache", nil},
		{"GET", "/readyz?exclude=nope", nil}, {"GET", "/readyz/db", nil}, {"GET", "/readyz/cache", nil},
		{"GET", "/readyz/nope", nil}, {"GET", "/readyz/nope?verbose", nil}, {"GET", "/readyz", healthJSON},
		{"HEAD", "/prestop", nil},
		// The path is the one net/http's Request.URL.Path holds: decoded.
		{"GET", "/readyz%2Fdb", nil}, {"GET", "/readyz%2Fcache?verbose", nil}, {"GET", "/%72eadyz", nil},
	}
	compare := func(phase string) {
		t.Helper()
		for _, x := range questions {
			f := testsupport.Do(t, c, x.method, r.base+x.path, x.hdr)
			h := testsupport.Do(t, c, x.method, r.httpB+x.path, x.hdr)
			what := phase + ": " + x.method + " " + x.path
			if f.Code != h.Code {
				t.Errorf("%s: Fiber %d, net/http %d", what, f.Code, h.Code)
			}
			if fb, hb := stamps.ReplaceAllString(f.Body, `"time":"T"`), stamps.ReplaceAllString(h.Body, `"time":"T"`); fb != hb {
				t.Errorf("%s: bodies differ:\nFiber:    %q\nnet/http: %q", what, f.Body, h.Body)
			}
			for _, hdr := range [][]http.Header{{f.Header, h.Header}, {h.Header, f.Header}} {
				for k, v := range hdr[0] {
					if k == "Date" {
						continue
					}
					if !slices.Equal(v, hdr[1][k]) {
						t.Errorf("%s: header %s: Fiber %q, net/http %q", what, k, f.Header[k], h.Header[k])
					}
				}
			}
		}
	}
	r.start()
	compare("serving")
	r.lc.BeginShutdown("test")
	compare("draining")
	testsupport.Timers(t, r.clk, 1)
	r.clk.Advance(5 * time.Second)
	if err := r.wait(); err != nil {
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
		app.Get("/slow", func(c *fiber.Ctx) error {
			close(entered)
			<-release
			return c.SendString("slept")
		})
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })
	})
	r.start()
	c := client(t)
	testsupport.Do(t, c, "GET", r.base+"/readyz", nil).Status(t, 200, "ok")
	if a := testsupport.Do(t, c, "GET", r.base+"/", nil); a.Code != 200 || a.Close {
		t.Fatalf("before the signal: %d close=%v", a.Code, a.Close)
	}
	slow := testsupport.GoFetch(client(t), "GET", r.base+"/slow")
	testsupport.Recv(t, entered, "the /slow handler")
	if got := r.lc.InFlight(); len(got) != 1 || got[0].Method != "GET" || got[0].Path != "/slow" {
		t.Fatalf("InFlight = %+v; want GET /slow", got)
	}
	r.lc.BeginShutdown("test")
	testsupport.Do(t, c, "GET", r.base+"/readyz", nil).Status(t, 503, "draining")
	testsupport.Do(t, c, "GET", r.base+"/healthz", nil).Status(t, 200, "ok")
	// The keep-alive connection used above is told to close, and the
	// next request goes on a fresh one, still served.
	if a := testsupport.Do(t, c, "GET", r.base+"/", nil); a.Code != 200 || !a.Close || a.Body != "hello" {
		t.Fatalf("in the window: %d close=%v %q; want 200 with Connection: close", a.Code, a.Close, a.Body)
	}
	if a := testsupport.Do(t, c, "GET", r.base+"/", nil); a.Code != 200 {
		t.Fatalf("the next request in the window: %d", a.Code)
	}
	testsupport.Timers(t, r.clk, 1)
	r.clk.Advance(2 * time.Second)
	testsupport.Await(t, r.lc.Events().WindowEnded)
	if r.lc.Events().HTTPDrained.Fired() {
		t.Fatal("the drain ended with a request in flight")
	}
	close(release)
	if a := testsupport.Recv(t, slow, "the in-flight request's answer").OK(t); a.Code != 200 || a.Body != "slept" {
		t.Fatalf("the in-flight request got %d %q", a.Code, a.Body)
	}
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v; want a clean drain", err)
	}
	if _, err := c.Get(r.base + "/"); err == nil {
		t.Fatal("the Fiber listener still accepts after Run returned")
	}
}

// TestStuckRequestIsCutAndNamed: a request that outlives the teardown
// budget is cut, named with method, path and age, and Run's error wraps
// context.DeadlineExceeded (a non-zero exit).
func TestStuckRequestIsCutAndNamed(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	r := newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second}, false, func(app *fiber.App) {
		app.Post("/stuck", func(c *fiber.Ctx) error {
			close(entered)
			// Ignores everything (fasthttp closes RequestCtx.Done() when
			// the teardown starts, so it is not watched here).
			<-release
			return nil
		})
	})
	r.start()
	reqDone := testsupport.GoFetch(client(t), "POST", r.base+"/stuck")
	testsupport.Recv(t, entered, "the /stuck handler")
	lameducktest.EndWindow(t, r.lc, r.clk)
	testsupport.Timers(t, r.clk, 1) // the drain's deadline
	r.clk.Advance(3 * time.Second)
	err := r.wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	if f := testsupport.Recv(t, reqDone, "the stuck request's end"); f.Err == nil {
		t.Fatalf("the stuck request was answered %d; it should have been cut", f.Code)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "HTTP drain cut 1 in-flight request(s) after 3s: POST /stuck (age 4s)") {
		t.Fatalf("the cut request is not named with method, path and age:\n%s", logs)
	}
}

func TestRejectModeOnFiber(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	r := newRig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true}, false, func(app *fiber.App) {
		app.Get("/slow", func(c *fiber.Ctx) error { close(entered); <-release; return nil })
		app.Get("/new", func(c *fiber.Ctx) error { return nil })
	})
	r.start()
	slow := testsupport.GoFetch(client(t), "GET", r.base+"/slow")
	testsupport.Recv(t, entered, "the /slow handler")
	lameducktest.EndWindow(t, r.lc, r.clk)
	var a testsupport.Reply
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && a.Code != 503; {
		a = testsupport.Do(t, client(t), "GET", r.base+"/new", nil)
	}
	if a.Code != 503 || a.Header.Get("Retry-After") != "1" || !a.Close || a.Body != "lameduck: shutting down; retry on another instance\n" {
		t.Fatalf("reject mode: %d %v %q", a.Code, a.Header, a.Body)
	}
	close(release)
	if a := testsupport.Recv(t, slow, "the in-flight request's answer").OK(t); a.Code != 200 {
		t.Fatalf("the in-flight request got %d", a.Code)
	}
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
}

// TestWebSocketsOnFiber: a WebSocket opened before the signal is tracked
// (hijacked) and closed by its handler with 1001 when the window ends; one
// asked for after the signal is refused 503 with Retry-After.
func TestWebSocketsOnFiber(t *testing.T) {
	var r *rig
	r = newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/ws", fiberws.New(func(c *fiberws.Conn) {
			<-r.lc.WindowEnded()
			// A write deadline a loaded machine cannot outlast (a hang
			// guard): a 1s one could pass before the frame is written.
			_ = c.WriteControl(fiberws.CloseMessage,
				fiberws.FormatCloseMessage(fiberws.CloseGoingAway, "draining"), time.Now().Add(testsupport.Guard))
		}))
	})
	r.start()
	ctx := testsupport.Context(t, testsupport.Guard) // every dial and read below, a hang guard
	ws, _, err := websocket.Dial(ctx, strings.Replace(r.base, "http", "ws", 1)+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	var got []lameduck.InFlightRequest
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = r.lc.InFlight(); len(got) == 1 {
			break
		}
	}
	if len(got) != 1 || !got[0].Hijacked || got[0].Path != "/ws" {
		t.Fatalf("InFlight = %+v; want the WebSocket, hijacked", got)
	}
	r.lc.BeginShutdown("test")
	_, _, err = websocket.Dial(ctx, strings.Replace(r.base, "http", "ws", 1)+"/ws", nil)
	if err == nil {
		t.Fatal("a WebSocket upgrade after the signal was accepted")
	}
	a := testsupport.Do(t, client(t), "GET", r.base+"/ws", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket",
		"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
	if a.Code != 503 || a.Header.Get("Retry-After") != "1" || !strings.Contains(a.Body, "upgrade on another instance") {
		t.Fatalf("upgrade after the signal: %d %v %q", a.Code, a.Header, a.Body)
	}
	testsupport.Timers(t, r.clk, 1)
	r.clk.Advance(time.Second)
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("the WebSocket ended with %v; want a 1001 close frame", err)
	}
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v; the WebSocket closed cleanly", err)
	}
}

// TestHijackedRequestKeepsItsName: a WebSocket stays in flight after Fiber
// has put its Ctx back in the pool, and requests for other paths reuse
// that Ctx's path buffer; the WebSocket is still named GET /ws, not by
// the bytes of a later path.
func TestHijackedRequestKeepsItsName(t *testing.T) {
	var r *rig
	r = newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/ws", fiberws.New(func(c *fiberws.Conn) {
			<-r.lc.WindowEnded()
			// A write deadline a loaded machine cannot outlast (a hang
			// guard): a 1s one could pass before the frame is written.
			_ = c.WriteControl(fiberws.CloseMessage,
				fiberws.FormatCloseMessage(fiberws.CloseGoingAway, "draining"), time.Now().Add(testsupport.Guard))
		}))
		app.Get("/*", func(c *fiber.Ctx) error { return c.SendString("ok") })
	})
	r.start()
	ctx := testsupport.Context(t, testsupport.Guard) // every dial and read below, a hang guard
	ws, _, err := websocket.Dial(ctx, strings.Replace(r.base, "http", "ws", 1)+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	waitInFlight(t, r.lc, 1)
	c := client(t)
	for i := range 40 {
		testsupport.Do(t, c, "GET", r.base+[]string{"/zq", "/abcdefgh"}[i%2], nil)
	}
	if got := r.lc.InFlight(); len(got) != 1 || !got[0].Hijacked || got[0].Method != "GET" || got[0].Path != "/ws" {
		t.Fatalf("InFlight after other requests = %+v; want GET /ws, hijacked", got)
	}
	lameducktest.EndWindow(t, r.lc, r.clk)
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("the WebSocket ended with %v; want a 1001 close frame", err)
	}
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
}

// waitInFlight waits (up to a generous bound) until exactly n requests are
// in flight, all hijacked.
func waitInFlight(t *testing.T, lc *lameduck.Lifecycle, n int) {
	t.Helper()
	var got []lameduck.InFlightRequest
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = lc.InFlight(); len(got) == n && (n == 0 || got[n-1].Hijacked) {
			return
		}
	}
	t.Fatalf("InFlight = %+v; want %d hijacked", got, n)
}

// TestHandlerRunsWithoutTheMiddleware: a Fiber app without requests in
// flight stops at once, and Run returns nil.
func TestIdleAppStopsAtOnce(t *testing.T) {
	r := newRig(t, lameduck.Config{ShutdownDelay: time.Second}, false, nil)
	r.start()
	lameducktest.EndWindow(t, r.lc, r.clk)
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRegistersTheApp(t *testing.T) {
	lc, _ := lameducktest.New(t, lameduck.Config{})
	if _, err := ldfiber.New(lc, ""); err == nil || !strings.Contains(err.Error(), "Addr") {
		t.Fatalf("New with no address: %v; want an error naming Addr", err)
	}
	app, err := ldfiber.New(lc, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app.Get("/", func(c *fiber.Ctx) error { return nil })
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
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if tracked {
		app.Use(ldfiber.Middleware(lc))
	}
	app.Get("/api/orders", func(c *fiber.Ctx) error { return c.SendStatus(200) })
	return app.Handler()
}

func TestMiddlewareAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop records: allocation counts are meaningless")
	}
	bare, tracked := trackedApp(t, false), trackedApp(t, true)
	fc := requestCtx("/api/orders")
	bare(fc)
	tracked(fc)
	nb := testing.AllocsPerRun(1000, func() { bare(fc) })
	nt := testing.AllocsPerRun(1000, func() { tracked(fc) })
	if nt != nb {
		t.Fatalf("a Fiber request allocates %.1f times with the middleware, %.1f without; want no difference", nt, nb)
	}
}

// BenchmarkMiddleware runs a Fiber request through app.Handler() with and
// without the middleware; compare the two with benchstat.
func BenchmarkMiddleware(b *testing.B) {
	for _, tracked := range []bool{false, true} {
		name := "bare"
		if tracked {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) {
			h := trackedApp(b, tracked)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				fc := requestCtx("/api/orders")
				for pb.Next() {
					h(fc)
				}
			})
		})
	}
}

// TestStreamIsTracked: a body streamed after the handler returned is a
// request in flight until the stream ends; the teardown waits for it.
func TestStreamIsTracked(t *testing.T) {
	var r *rig
	r = newRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/events", func(c *fiber.Ctx) error {
			ldfiber.Stream(r.lc, c, func(w *bufio.Writer) {
				w.WriteString("data: hello\n\n")
				if w.Flush() != nil {
					return
				}
				<-r.lc.WindowEnded()
				w.WriteString("event: bye\n\n")
			})
			return nil
		})
	})
	r.start()
	resp, err := client(t).Get(r.base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "data: hello\n" {
		t.Fatalf("first line %q", line)
	}
	if got := r.lc.InFlight(); len(got) != 1 || got[0].Path != "/events" {
		t.Fatalf("InFlight while streaming = %+v; want GET /events", got)
	}
	lameducktest.EndWindow(t, r.lc, r.clk)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "event: bye\n\n") {
		t.Fatalf("the stream ended with %q, %v; want the final event", rest, err)
	}
	if err := r.wait(); err != nil {
		t.Fatal(err)
	}
}
