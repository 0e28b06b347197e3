package lameduck_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/lameduck/lameduck"
)

// trackFirst is what a non-net/http server's middleware does with
// TrackRequest, written against net/http so the core tests need no
// third-party server.
func trackFirst(lc *lameduck.Lifecycle, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrade := lc.Phase() >= lameduck.PhaseDraining && r.Header.Get("Upgrade") != ""
		tr, v := lc.TrackRequest(r.Method, r.URL.Path, upgrade)
		switch {
		case v.Probe:
			lc.ProbeHandler().ServeHTTP(w, r)
			return
		case v.Refuse != "":
			w.Header().Set("Retry-After", lameduck.RetryAfterSeconds)
			w.Header().Set("Connection", "close")
			http.Error(w, v.Refuse, http.StatusServiceUnavailable)
			return
		case v.Close:
			w.Header().Set("Connection", "close")
		}
		defer tr.End()
		next.ServeHTTP(w, r)
	})
}

// funcsServer registers an *http.Server through AddServerFuncs (not
// AddServer, so nothing instruments it) and records the calls the
// Lifecycle makes.
type funcsServer struct {
	srv       *http.Server
	mu        sync.Mutex
	calls     []string // guarded by mu
	shutdownE chan struct{}
}

func (f *funcsServer) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *funcsServer) Calls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, ",")
}

func (h *harness) serveFuncs(handler http.Handler) (string, *funcsServer) {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	f := &funcsServer{srv: &http.Server{Handler: trackFirst(h.lc, handler)}, shutdownE: make(chan struct{})}
	err = h.lc.AddServerFuncs(lameduck.ServerFuncs{
		Name:  "custom",
		Serve: func(ln net.Listener) error { f.record("serve"); return f.srv.Serve(ln) },
		Shutdown: func(ctx context.Context) error {
			f.record("shutdown")
			close(f.shutdownE)
			return f.srv.Shutdown(ctx)
		},
		Close: func() error { f.record("close"); return f.srv.Close() },
	}, ln)
	if err != nil {
		h.t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), f
}

func TestServerFuncsDrainLikeAnHTTPServer(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 2 * time.Second, ShutdownTeardown: 10 * time.Second})
	entered, release := make(chan struct{}), make(chan struct{})
	base, f := h.serveFuncs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	}))
	h.start(t)
	c := client(t)
	get(t, c, base+"/readyz").status(t, 200, "ok")
	slow := getAsync(client(t), base+"/slow")
	recv(t, entered, "entered")
	if got := h.lc.InFlight(); len(got) != 1 || got[0].Path != "/slow" {
		t.Fatalf("InFlight = %+v; want the /slow request", got)
	}

	h.lc.BeginShutdown("test")
	get(t, c, base+"/readyz").status(t, 503, "draining")
	get(t, c, base+"/healthz").status(t, 200, "ok")
	resp, err := c.Get(base + "/new")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("a request in the window got %d, Close=%v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	h.timers(1)
	h.clock.Advance(2 * time.Second)
	await(t, h.lc.Events().WindowEnded)
	recv(t, f.shutdownE, "the teardown to call Shutdown") // the teardown asked the server to stop...
	if h.lc.Events().HTTPDrained.Fired() {
		t.Fatal("the drain ended with a tracked request in flight")
	}
	close(release) // ...and waits for the tracked request
	if p := recv(t, slow, "the in-flight request's answer"); p.err != nil || p.code != 200 || p.body != "done" {
		t.Fatalf("the in-flight request got %d %q (%v)", p.code, p.body, p.err)
	}
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; want a clean drain", err)
	}
	if got := f.Calls(); got != "serve,shutdown" {
		t.Fatalf("calls %q; want serve,shutdown (no Close after a clean drain)", got)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "server=custom") {
		t.Fatalf("the listening line does not name the server:\n%s", logs)
	}
}

func TestServerFuncsCutAtTheBudgetAndNamed(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second})
	entered := make(chan struct{})
	base, f := h.serveFuncs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // until its connection is closed
	}))
	h.start(t)
	reqDone := sendAsync(client(t), "POST", base+"/stuck")
	recv(t, entered, "entered")
	h.endWindow(time.Second)
	h.timers(1) // the HTTP drain's timer
	// Past the accept grace (a timer of its own for a moment): the drain's
	// deadline is the only timer left.
	recv(t, f.shutdownE, "the teardown to call Shutdown")
	h.cutAtBudget(t, 3*time.Second, reqDone)
	if logs := h.logs.String(); !strings.Contains(logs, "HTTP drain cut 1 in-flight request(s) after 3s: POST /stuck (age 4s)") {
		t.Fatalf("the cut request is not named with method, path and age:\n%s", logs)
	}
	if got := f.Calls(); got != "serve,shutdown,close" {
		t.Fatalf("calls %q; want serve,shutdown,close", got)
	}
}

func TestTrackRequestVerdicts(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	tr, v := h.lc.TrackRequest("GET", "/api", false)
	if v != (lameduck.Verdict{}) {
		t.Fatalf("serving: %+v; want the zero Verdict", v)
	}
	if got := h.lc.InFlight(); len(got) != 1 || got[0].Method != "GET" || got[0].Path != "/api" {
		t.Fatalf("InFlight = %+v", got)
	}
	tr.End()
	if got := h.lc.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight after End = %+v", got)
	}
	for _, p := range []string{"/healthz", "/readyz", "/readyz/db", "/startupz"} {
		if tr, v := h.lc.TrackRequest("GET", p, false); !v.Probe || tr != (lameduck.Tracked{}) {
			t.Fatalf("%s: %+v; want Probe, untracked", p, v)
		}
	}
	if _, v := h.lc.TrackRequest("GET", "/prestop", false); v.Probe {
		t.Fatal("/prestop is a probe without Config.PreStop")
	}
	h.lc.BeginShutdown("test")
	tr, v = h.lc.TrackRequest("GET", "/api", false)
	if !v.Close || v.Refuse != "" || v.Probe {
		t.Fatalf("draining: %+v; want Close", v)
	}
	tr.End()
	if tr, v := h.lc.TrackRequest("GET", "/ws", true); !v.Close || v.Refuse == "" || tr != (lameduck.Tracked{}) {
		t.Fatalf("an upgrade while draining: %+v; want refused, untracked", v)
	}
	lameduck.Tracked{}.End() // the zero value does nothing

	sep := newHarness(t, lameduck.Config{ProbeAddr: "127.0.0.1:0"})
	tr, v = sep.lc.TrackRequest("GET", "/healthz", false)
	if v.Probe {
		t.Fatal("with Config.ProbeAddr the probes are not on the application's listeners")
	}
	tr.End()
}

func TestServerFuncsRejectModeRefuses(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true})
	entered, release := make(chan struct{}), make(chan struct{})
	base, _ := h.serveFuncs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
	}))
	h.start(t)
	slow := getAsync(client(t), base+"/slow")
	recv(t, entered, "entered")
	h.endWindow(time.Second)
	var got probe
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && got.code != 503; {
		got = get(t, client(t), base+"/new")
	}
	if got.code != 503 || !strings.Contains(got.body, "retry on another instance") {
		t.Fatalf("a request in reject mode got %d %q", got.code, got.body)
	}
	// Probes are not application requests: answered, not refused.
	get(t, client(t), base+"/healthz").status(t, 200, "ok")
	get(t, client(t), base+"/readyz").status(t, 503, "draining")
	close(release)
	if p := recv(t, slow, "the in-flight request's answer"); p.err != nil || p.code != 200 {
		t.Fatalf("the in-flight request got %d (%v)", p.code, p.err)
	}
	h.waitOK(t)
}

// TestServerFuncsHijackedEndsWithItsConnection: a hijacked request on a
// ServerFuncs listener ends when its connection closes, does not hold the
// idle drain, and is closed and named at the budget.
func TestServerFuncsHijackedEndsWithItsConnection(t *testing.T) {
	for _, closeItself := range []bool{true, false} {
		t.Run(fmt.Sprintf("handler closes=%v", closeItself), func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 4 * time.Second})
			hijacked := make(chan net.Conn, 1)
			base, _ := h.serveFuncs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if conn := upgrade(t, w); conn != nil {
					hijacked <- conn
				}
			}))
			// The middleware above ends the request when the handler
			// returns; this one hands the end to the connection.
			h.start(t)
			conn := dialUpgrade(t, base)
			sc := recv(t, hijacked, "the hijacked connection")
			// The middleware ends /ws once the handler has returned, which
			// is after it handed the connection over: wait for that end.
			for deadline := time.Now().Add(10 * time.Second); len(h.lc.InFlight()) != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the /ws request did not end within 10s of its handler returning: InFlight = %+v", h.lc.InFlight())
				}
			}
			// A second, direct use of the API on the hijacked connection,
			// with method and path aliasing a buffer that the server
			// reuses once the handler has returned (as Fiber's pooled Ctx
			// does): Hijacked copies them.
			reqBuf := []byte("GET /ws2")
			tr, _ := h.lc.TrackRequest(unsafe.String(&reqBuf[0], 3), unsafe.String(&reqBuf[4], 4), false)
			if !tr.Hijacked(sc) {
				t.Fatal("Hijacked = false for a connection accepted on the Lifecycle's listener")
			}
			copy(reqBuf, "PUT /abc")
			if got := h.lc.InFlight(); len(got) != 1 || !got[0].Hijacked || got[0].Path != "/ws2" {
				t.Fatalf("InFlight = %+v; want /ws2, hijacked", got)
			}
			if closeItself {
				sc.Close()
				if got := h.lc.InFlight(); len(got) != 0 {
					t.Fatalf("InFlight after the connection closed = %+v", got)
				}
				h.endWindow(time.Second)
				h.waitOK(t)
				return
			}
			h.endWindow(time.Second)
			h.timers(1)
			h.clock.Advance(4 * time.Second)
			if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run = %v; want the hijacked request cut", err)
			}
			if _, err := io.Copy(io.Discard, conn); err != nil && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("client read: %v", err)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "GET /ws2 (age 5s, hijacked)") {
				t.Fatalf("the forced close is not named:\n%s", logs)
			}
		})
	}
}

func TestAddServerFuncsNamesWhatIsMissing(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	err := h.lc.AddServerFuncs(lameduck.ServerFuncs{Name: "x"}, nil)
	if err == nil || !strings.Contains(err.Error(), "Serve Shutdown Addr") || !strings.HasPrefix(err.Error(), "lameduck: ") {
		t.Fatalf("err = %v; want it to name Serve, Shutdown and Addr", err)
	}
}

func TestServerFuncsBindsItsAddr(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	bound := make(chan string, 1)
	srv := &http.Server{}
	err := h.lc.AddServerFuncs(lameduck.ServerFuncs{Name: "x", Addr: "127.0.0.1:0",
		Serve:    func(ln net.Listener) error { bound <- ln.Addr().String(); return srv.Serve(ln) },
		Shutdown: srv.Shutdown}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if addr := recv(t, bound, "Serve"); !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("served on %s", addr)
	}
	h.lc.BeginShutdown("test")
	h.waitOK(t)
}

func TestTrackRequestAllocatesNothing(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	track := func() {
		tr, _ := h.lc.TrackRequest("GET", "/api/orders", false)
		tr.End()
	}
	if n := exactAllocs(t, 1000, track); n != 0 {
		t.Fatalf("TrackRequest+End allocated %d times in 1000 requests, want 0", n)
	}
}

// BenchmarkTrackRequest measures the tracking a non-net/http middleware
// pays per request: TrackRequest and End.
func BenchmarkTrackRequest(b *testing.B) {
	lc, err := lameduck.New(lameduck.Config{LookupEnv: env(nil), IgnoreSignals: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr, _ := lc.TrackRequest("GET", "/api/orders", false)
			tr.End()
		}
	})
}
