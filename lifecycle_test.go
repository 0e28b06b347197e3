package lameduck_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
)

func TestPhasesThroughACleanShutdown(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 30 * time.Second})
	release := make(chan struct{})
	booted := make(chan struct{})
	h.lc.AddStartupTask("warm-up", func(ctx context.Context) error {
		close(booted)
		<-release
		return nil
	})
	base := h.serve(http.NotFoundHandler())
	c := client(t)
	h.run()

	recv(t, booted, "booted")
	if got := h.lc.Phase(); got != lameduck.PhaseStarting {
		t.Fatalf("phase during boot = %s", got)
	}
	get(t, c, base+"/healthz").status(t, 200, "ok")
	get(t, c, base+"/readyz").status(t, 503, "starting")
	get(t, c, base+"/startupz").status(t, 503, "starting")

	close(release)
	await(t, h.lc.Events().StartupDone)
	get(t, c, base+"/readyz").status(t, 200, "ok")
	get(t, c, base+"/startupz").status(t, 200, "ok")

	h.lc.BeginShutdown("test")
	// Readiness flips before any wait: no clock advance yet.
	if got := h.lc.Phase(); got != lameduck.PhaseDraining {
		t.Fatalf("phase right after BeginShutdown = %s, want draining", got)
	}
	get(t, c, base+"/readyz").status(t, 503, "draining")
	get(t, c, base+"/healthz").status(t, 200, "ok")
	get(t, c, base+"/startupz").status(t, 200, "ok")

	h.timers(1) // the window's timer
	if n := h.clock.Advance(5*time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
		t.Fatalf("window ended before 5s (%d timer(s) fired)", n)
	}
	// The application still serves inside the window, on new connections.
	if p := get(t, client(t), base+"/nothing"); p.code != 404 {
		t.Fatalf("application route during the window: %d", p.code)
	}
	h.clock.Advance(time.Nanosecond)
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if d := windowLength(t, h.lc); d != 5*time.Second {
		t.Fatalf("window lasted %s, want exactly 5s", d)
	}
	if h.lc.Phase() != lameduck.PhaseStopped {
		t.Fatalf("phase after Run = %s", h.lc.Phase())
	}
	if n := strings.Count(h.logs.String(), "draining — /readyz now 503, waiting 5s for endpoint removal"); n != 1 {
		t.Fatalf("draining line said %d times, want once:\n%s", n, h.logs)
	}
}

func TestTeardownCutsAtItsBudget(t *testing.T) {
	for _, tc := range []struct {
		name       string
		background bool          // the service uses GoWrite: the join keeps its tail
		httpEnd    time.Duration // when the HTTP drain is cut, after the window
	}{
		{"all of it for requests", false, 3 * time.Second},
		{"less the join's tail", true, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cut atomic.Int64 // what Config.OnTransition hears
			h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second, JoinBudget: 500 * time.Millisecond,
				OnTransition: func(tr lameduck.Transition) {
					if tr.Kind == lameduck.TransitionCut {
						cut.Add(int64(tr.Count))
					}
				}})
			if tc.background {
				done := make(chan struct{})
				if err := h.lc.GoWrite("audit-row", 0, func(context.Context) error { close(done); return nil }); err != nil {
					t.Fatalf("GoWrite: %v", err)
				}
				recv(t, done, "the write to run")
			}
			entered := make(chan struct{})
			release := make(chan struct{})
			defer close(release)
			base, shutdown := h.serveNotified(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			h.start(t)
			reqDone := sendAsync(client(t), "GET", base+"/stuck")
			recv(t, entered, "entered")
			h.clock.Advance(1500 * time.Millisecond) // the request is 1.5s old at the signal
			h.endWindow(time.Second)
			h.timers(1) // the HTTP drain's timer
			// Past the accept grace (a timer of its own for a moment): the
			// drain's deadline is the only timer left.
			recv(t, shutdown, "the drain to call Shutdown")
			h.cutAtBudget(t, tc.httpEnd, reqDone)
			age := 2500*time.Millisecond + tc.httpEnd
			want := "HTTP drain cut 1 in-flight request(s) after " + tc.httpEnd.String() + ": GET /stuck (age " + age.String() + ")"
			if logs := h.logs.String(); !strings.Contains(logs, want) {
				t.Fatalf("log does not name the cut request with its age (%q):\n%s", want, logs)
			}
			if n := cut.Load(); n != 1 {
				t.Fatalf("OnTransition heard %d cut request(s), want 1", n)
			}
		})
	}
}

func TestSecondSignalChangesNothing(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 4 * time.Second, ShutdownTeardown: 10 * time.Second})
	exited := -1
	lameduck.SetExit(h.lc, func(code int) { exited = code })
	h.serve(http.NotFoundHandler())
	h.start(t)
	lameduck.Signal(h.lc, syscall.SIGTERM)
	h.timers(1)
	h.clock.Advance(time.Second)
	lameduck.Signal(h.lc, syscall.SIGTERM)
	lameduck.Signal(h.lc, syscall.SIGINT)
	if n := h.clock.Advance(3*time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
		t.Fatalf("a second signal shortened the window (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	h.waitOK(t)
	if exited != -1 {
		t.Fatalf("exit(%d) called without ExitOnSecondSignal", exited)
	}
	if n := strings.Count(h.logs.String(), "ignored: the shutdown sequence runs to completion"); n != 2 {
		t.Fatalf("want each extra signal logged once, got %d:\n%s", n, h.logs)
	}
}

func TestExitOnSecondSignal(t *testing.T) {
	secondSignalExits(t, syscall.SIGINT, "SIGINT")
}

func TestPreStopThenSIGTERMGivesOneWindow(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second, PreStopToken: "s3cret", ExitOnSecondSignal: true})
	lameduck.SetExit(h.lc, func(code int) { t.Errorf("exit(%d): the SIGTERM after the hook is not a second signal", code) })
	base := h.serve(http.NotFoundHandler())
	h.start(t)
	c := client(t)

	// Without the token nothing drains, nor does a HEAD.
	get(t, c, base+"/prestop").status(t, 401, "unauthorized")
	if resp, err := c.Head(base + "/prestop"); err != nil || resp.StatusCode != 405 {
		t.Fatalf("HEAD /prestop: %v %v, want 405", resp, err)
	}
	if h.lc.Events().ShutdownInitiated.Fired() {
		t.Fatal("an unauthorised /prestop started the drain")
	}

	hook := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("GET", base+"/prestop", nil)
		req.Header.Set(lameduck.PreStopTokenHeader, "s3cret")
		resp, err := c.Do(req)
		if err != nil {
			hook <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		hook <- reply{probe: probe{code: resp.StatusCode}}
	}()
	await(t, h.lc.Events().ShutdownInitiated)
	get(t, c, base+"/readyz").status(t, 503, "draining")
	h.timers(1)
	if n := h.clock.Advance(4 * time.Second); n != 0 {
		t.Fatalf("%d timer(s) fired 4s into a 5s window", n)
	}
	select {
	case p := <-hook:
		t.Fatalf("hook answered %d (%v) before the window passed", p.code, p.err)
	default:
	}
	h.clock.Advance(time.Second)
	if p := recv(t, hook, "the hook's answer"); p.err != nil || p.code != 200 {
		t.Fatalf("hook answered %d (%v), want 200", p.code, p.err)
	}
	// The kubelet's SIGTERM after the hook adds no second window.
	lameduck.Signal(h.lc, syscall.SIGTERM)
	h.waitOK(t)
	if d := sequenceLength(t, h.lc); d != 5*time.Second {
		t.Fatalf("sequence took %s on the fake clock, want exactly one 5s window", d)
	}
	h.logged(t, "SIGTERM after the preStop hook: the sequence is already running; no second window", "missing log line")
}

func TestPreStopIsOptIn(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	rec := httptest.NewRecorder()
	h.lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/prestop", nil))
	if rec.Code != 404 || h.lc.Events().ShutdownInitiated.Fired() {
		t.Fatalf("GET /prestop without PreStop: %d, drain started=%v", rec.Code, h.lc.Events().ShutdownInitiated.Fired())
	}
}

func TestStartupFailureNeverReady(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	ready := make(chan probe, 1)
	h.lc.AddStartupTask("migrate", func(ctx context.Context) error {
		rec := httptest.NewRecorder()
		h.lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		ready <- probe{rec.Code, rec.Body.String()}
		return errors.New("schema version 7 is newer than this binary")
	})
	h.lc.AddStartupTask("never", func(ctx context.Context) error {
		t.Error("a task after a failed one ran")
		return nil
	})
	h.serve(http.NotFoundHandler())
	h.run()
	err := h.wait() // no window: the clock is never advanced
	if !errors.Is(err, lameduck.ErrStartupFailed) || !strings.Contains(err.Error(), `"migrate"`) {
		t.Fatalf("Run = %v, want ErrStartupFailed naming the task", err)
	}
	recv(t, ready, "the task's probe").status(t, 503, "starting")
	if h.lc.Events().StartupDone.Fired() {
		t.Fatal("StartupDone fired after a failed task")
	}
	h.logged(t, `startup task \"migrate\": startup failed after 1 try in 0s: schema version 7`, "log does not name the task and its error")
}

func TestShutdownDuringStartupCancelsTheTask(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 2 * time.Second})
	started := h.startupUntilCancelled("warm-up")
	h.serve(http.NotFoundHandler())
	h.run()
	recv(t, started, "started")
	h.lc.BeginShutdown("test")
	// No clock advance: a pod that never became ready waits no window.
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; an interrupted boot is not a failure", err)
	}
	if h.lc.Events().StartupDone.Fired() {
		t.Fatal("StartupDone fired for an interrupted boot")
	}
}

func TestContextCancellationStartsTheSequence(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 2 * time.Second})
	h.serve(http.NotFoundHandler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.lc.Run(ctx) }()
	await(t, h.lc.Events().StartupDone)
	cancel()
	await(t, h.lc.Events().ShutdownInitiated)
	h.timers(1)
	h.clock.Advance(2 * time.Second)
	if err := recv(t, done, "Run to return"); err != nil {
		t.Fatal(err)
	}
}

func TestBindFailureReturnsAtOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Hour})
	h.lc.AddServer(&http.Server{Addr: taken.Addr().String()}, nil)
	err = h.lc.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen on "+taken.Addr().String()) {
		t.Fatalf("Run = %v, want the bind error", err)
	}
	if err := h.lc.AddServer(&http.Server{}, nil); !errors.Is(err, lameduck.ErrAlreadyRunning) {
		t.Fatalf("AddServer after Run = %v", err)
	}
}

func TestProbeListener(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ProbeAddr: "127.0.0.1:0"})
	app := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) }))
	h.start(t)
	addr := h.probeListener()
	c := client(t)
	get(t, c, "http://"+addr+"/readyz").status(t, 200, "ok")
	if p := get(t, c, app+"/readyz"); p.code != 299 {
		t.Fatalf("the app's /readyz went to the probes (%d) although ProbeAddr is set", p.code)
	}
	h.lc.BeginShutdown("test")
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

// blockOn is a log handler that holds the line whose message begins with
// prefix until release is closed, as a blocked log pipe would, and closes
// entered when it starts to; it closes noted once it has written a line
// that begins with note.
type blockOn struct {
	slog.Handler
	prefix, note            string
	entered, release, noted chan struct{}
}

func (h blockOn) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		close(h.entered)
		<-h.release
	}
	err := h.Handler.Handle(ctx, r)
	if strings.HasPrefix(r.Message, h.note) {
		close(h.noted)
	}
	return err
}

func (h blockOn) WithAttrs(a []slog.Attr) slog.Handler {
	return blockOn{h.Handler.WithAttrs(a), h.prefix, h.note, h.entered, h.release, h.noted}
}

// The sequence's start is known from the instant it begins: while the
// goroutine that began it still writes its draining line, a BeginShutdown
// that loses reads ShutdownInitiated's time, and a server that fails then
// (Run's own begin loses) gets the whole window from that start, and the
// stopped line. Before, Run read a zero start: the window was skipped and
// Run returned before ShutdownInitiated fired, without the stopped line.
func TestSequenceStartKnownBeforeItIsAnnounced(t *testing.T) {
	entered, release, serveFailed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	logs := &testsupport.LogBuffer{}
	h := newHarness(t, lameduck.Config{ShutdownDelay: 2 * time.Second, ShutdownTeardown: time.Second,
		Logger: slog.New(blockOn{slog.NewTextHandler(logs, nil), "lameduck: draining", "lameduck: serve on", entered, release, serveFailed})})
	logs.LogOnFailure(t)
	fail, stopped := make(chan struct{}), make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.lc.AddServerFuncs(lameduck.ServerFuncs{Name: "x",
		Serve: func(net.Listener) error {
			select {
			case <-fail:
				return errors.New("serve broke")
			case <-stopped:
				return nil
			}
		},
		Shutdown: func(context.Context) error { close(stopped); return nil },
	}, ln); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	began := h.clock.Now()
	go h.lc.BeginShutdown("SIGTERM stand-in")
	recv(t, entered, "the draining line to be written")
	if h.lc.BeginShutdown("second") {
		t.Fatal("a second BeginShutdown started the sequence again")
	}
	if at, ok := h.lc.Events().ShutdownInitiated.At(); !ok || !at.Equal(began) {
		t.Fatalf("ShutdownInitiated.At() = %v, %v while the draining line is written; want %v, true", at, ok, began)
	}
	if h.lc.Events().ShutdownInitiated.Fired() {
		t.Fatal("ShutdownInitiated fired before its line was written")
	}
	close(fail) // Run's own begin loses to the one writing its line
	// Logged before the error is handed to Run, which collects it by the
	// end of the teardown at the latest (the teardown waits for Serve).
	recv(t, serveFailed, "the serve error's line")
	close(release)
	h.timers(1)
	h.clock.Advance(2 * time.Second)
	if err := h.wait(); err == nil || !strings.Contains(err.Error(), "serve broke") {
		t.Fatalf("Run = %v; want the serve error", err)
	}
	if got := windowLength(t, h.lc); got != 2*time.Second {
		t.Fatalf("window %s; want the 2s of a serving pod", got)
	}
	if !strings.Contains(logs.String(), "lameduck: stopped") {
		t.Fatalf("no stopped line:\n%s", logs)
	}
}

// "Any of these starts the sequence: … a server that stops with an error":
// the serve error while serving starts the drain (readiness 503 draining,
// the window waited), and Run returns the error (exit 1).
func TestServeErrorStartsTheSequence(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 2 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := failingListener{ln, make(chan struct{})}
	if err := h.lc.AddServer(&http.Server{Handler: okHandler}, fl); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	close(fl.fail)
	await(t, h.lc.Events().ShutdownInitiated)
	probeOf(t, h.lc, "/readyz").status(t, 503, "draining")
	h.timers(1)
	if n := h.clock.Advance(2*time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
		t.Fatalf("a serve error skipped the window (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	err = h.wait()
	if err == nil || !strings.Contains(err.Error(), "the network went away") {
		t.Fatalf("Run = %v, want the serve error (exit 1)", err)
	}
	h.logged(t, `reason="server failed"`, "the draining line does not say a server failed")
}

// "Without ReadHeaderTimeout (or ReadTimeout) … Run logs a warning naming
// the server at startup" (docs/security.md); a server with one is not named.
func TestServerWithoutReadHeaderTimeoutIsWarned(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	bare := h.serve(okHandler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.lc.AddServer(&http.Server{Handler: okHandler, ReadHeaderTimeout: 10 * time.Second}, ln); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	logs := h.logs.String()
	if !strings.Contains(logs, "lameduck: the server on "+strings.TrimPrefix(bare, "http://")+" has no ReadHeaderTimeout") {
		t.Fatalf("no warning names the server without ReadHeaderTimeout:\n%s", logs)
	}
	if strings.Contains(logs, "the server on "+ln.Addr().String()+" has no ReadHeaderTimeout") {
		t.Fatalf("a server with ReadHeaderTimeout was warned about:\n%s", logs)
	}
	h.endWindow(time.Second)
	h.waitOK(t)
}
