package ldfasthttp_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldfasthttp "github.com/lameduck/lameduck/contrib/fasthttp"
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

// TestFastHTTPServer: a plain fasthttp server on the Lifecycle answers the
// probes exactly as a net/http server on the same Lifecycle does, serves a
// request in flight at the signal to its end, marks responses in the window
// Connection: close, and at the budget cuts and names a stuck request.
func TestFastHTTPServer(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, clk := testsupport.NewLifecycle(t, lameduck.Config{ShutdownDelay: 2 * time.Second, ShutdownTeardown: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	}()
	slowIn, stuckIn, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(release)
	app := func(fc *fasthttp.RequestCtx) {
		switch string(fc.Path()) {
		case "/slow":
			close(slowIn)
			<-lc.Events().WindowEnded.Done()
			fc.SetBodyString("slept")
		case "/stuck":
			close(stuckIn)
			<-release
		default:
			fc.SetBodyString("hello")
		}
	}
	fl, fb := testsupport.Listen(t)
	hl, hb := testsupport.Listen(t)
	srv := &fasthttp.Server{Handler: ldfasthttp.New(lc).Handler(app)}
	if err := ldfasthttp.AddServer(lc, srv, "", fl); err != nil {
		t.Fatal(err)
	}
	if err := lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, hl); err != nil {
		t.Fatal(err)
	}
	wait := lameducktest.Start(t, lc)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var qs []testsupport.ProbeQuestion
	for _, q := range [][2]string{{"GET", "/healthz"}, {"HEAD", "/readyz"}, {"GET", "/readyz?verbose"}, {"POST", "/readyz"},
		{"GET", "/startupz"}, {"GET", "/readyz/nope"}} {
		qs = append(qs, testsupport.ProbeQuestion{Method: q[0], Path: q[1]})
	}
	testsupport.CompareProbes(t, c, "fasthttp", "serving", fb, hb, qs, "Server")

	slow := testsupport.GoFetch(&http.Client{Timeout: 10 * time.Second}, "GET", fb+"/slow")
	stuck := testsupport.GoFetch(&http.Client{Timeout: 10 * time.Second}, "POST", fb+"/stuck")
	testsupport.Recv(t, slowIn, "the /slow handler")
	testsupport.Recv(t, stuckIn, "the /stuck handler")
	lc.BeginShutdown("test")
	if a := testsupport.Do(t, c, "GET", fb+"/", nil); a.Code != 200 || !a.Close || a.Body != "hello" {
		t.Fatalf("in the window: %d close=%v %q; want 200 with Connection: close", a.Code, a.Close, a.Body)
	}
	testsupport.Timers(t, clk, 1)
	clk.Advance(2 * time.Second)
	if a := testsupport.Recv(t, slow, "the in-flight request's answer"); a.Err != nil || a.Code != 200 || a.Body != "slept" {
		t.Fatalf("the in-flight request got %d %q, %v", a.Code, a.Body, a.Err)
	}
	testsupport.Timers(t, clk, 1)
	clk.Advance(3 * time.Second)
	if err := wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want the stuck request cut", err)
	}
	if a := testsupport.Recv(t, stuck, "the stuck request's end"); a.Err == nil {
		t.Fatalf("the stuck request was answered %d", a.Code)
	}
	if !strings.Contains(logs.String(), "cut 1 in-flight request(s) after 3s: POST /stuck (age 5s)") {
		t.Fatalf("the cut request is not named:\n%s", logs)
	}
}

func handler(tb testing.TB, tracked bool) fasthttp.RequestHandler {
	lc, err := lameduck.New(lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false }, IgnoreSignals: true})
	if err != nil {
		tb.Fatal(err)
	}
	h := func(fc *fasthttp.RequestCtx) { fc.SetStatusCode(200) }
	if tracked {
		return ldfasthttp.New(lc).Handler(h)
	}
	return h
}

func requestCtx() *fasthttp.RequestCtx {
	var fc fasthttp.RequestCtx
	fc.Request.Header.SetMethod("GET")
	fc.Request.SetRequestURI("/api/orders")
	return &fc
}

func TestHandlerAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop records: allocation counts are meaningless")
	}
	h, fc := handler(t, true), requestCtx()
	h(fc)
	if n := testing.AllocsPerRun(1000, func() { h(fc) }); n != 0 {
		t.Fatalf("the middleware allocates %.1f times per request, want 0", n)
	}
}

// BenchmarkHandler: a fasthttp request with and without the middleware.
func BenchmarkHandler(b *testing.B) {
	testsupport.BenchBareAndTracked(b, handler, func(h fasthttp.RequestHandler) func() {
		fc := requestCtx()
		return func() { h(fc) }
	})
}

// TestPathIsNetHTTPs: Path is, for each request target, the path that
// net/http's server puts in Request.URL.Path (it parses the target with
// url.ParseRequestURI): percent-decoded, neither cleaned nor lower-cased.
func TestPathIsNetHTTPs(t *testing.T) {
	for _, target := range []string{
		"/readyz", "/readyz%2Fdb", "/%72eadyz", "//readyz", "/a/../readyz", "/./readyz", "/readyz/",
		"/ReadyZ", "/a+b%20c", "/readyz?verbose=%2F", "http://example.com/readyz%2Fdb?x=1",
	} {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatal(err)
		}
		var fc fasthttp.RequestCtx // as fasthttp's server reads a request: a Host header
		fc.Request.Header.SetHost("example.com")
		fc.Request.SetRequestURI(target)
		if got := ldfasthttp.RequestPath(&fc); got != u.Path {
			t.Errorf("Path(%q) = %q; net/http's URL.Path is %q", target, got, u.Path)
		}
	}
	// A malformed escape, which net/http answers 400 itself, is kept.
	var fc fasthttp.RequestCtx
	fc.Request.SetRequestURI("/readyz%zz")
	if got := ldfasthttp.RequestPath(&fc); got != "/readyz%zz" {
		t.Errorf("Path(/readyz%%zz) = %q; want it as it came", got)
	}
}
