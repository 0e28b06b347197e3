package lameduck_test

// Promises of docs/probes-and-shutdown.md and docs/security.md that no other
// test held; docs/promises.md maps each promise to its test.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

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
	h.run()
	await(t, h.lc.Events().StartupDone)
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
	if !strings.Contains(h.logs.String(), `reason="server failed"`) {
		t.Fatalf("the draining line does not say a server failed:\n%s", h.logs)
	}
}

// stuckServer registers a server whose handler blocks until the request's
// context ends, and returns a func that sends GET path and reports when it
// entered the handler.
func stuckServer(t *testing.T, h *harness) (send func(path string), results <-chan error) {
	t.Helper()
	entered := make(chan struct{})
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	}))
	h.run()
	await(t, h.lc.Events().StartupDone)
	c := client(t)
	res := make(chan error, 64)
	return func(path string) {
		go func() {
			resp, err := c.Get(base + path)
			if err == nil {
				resp.Body.Close()
			}
			res <- err
		}()
		recv(t, entered, "the request "+path+" to enter its handler")
	}, res
}

// "The HTTP drain stops at T minus a tail kept for steps 2 and 3 …: 500ms
// (or LAMEDUCK_JOIN_BUDGET, when set) if any background task was ever
// started, plus as much again if closers are registered; if that is more
// than T/2, each is T/4 instead. A service that uses neither gives
// in-flight requests all of T. With T = 3s and one GoWrite, the cut line
// reads after 2.5s." A readiness check with Refresh is the Lifecycle's own
// work, not background work: it keeps no tail (it used to, as a GoLoop).
func TestHTTPDrainKeepsATailForTheJoin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		teardown   time.Duration
		background bool
		closer     bool
		httpEnd    time.Duration
		refresh    bool // a readiness check with MaxAge and Refresh
	}{
		{"neither", 3 * time.Second, false, false, 3 * time.Second, false},
		{"neither, with a Refresh check", 3 * time.Second, false, false, 3 * time.Second, true},
		{"one GoWrite", 3 * time.Second, true, false, 2500 * time.Millisecond, false},
		{"a closer", 3 * time.Second, false, true, 2500 * time.Millisecond, false},
		{"GoWrite and a closer", 3 * time.Second, true, true, 2 * time.Second, false},
		{"more than half of T", 1500 * time.Millisecond, true, true, 750 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: tc.teardown})
			if tc.refresh {
				if err := h.lc.AddCheck(health.Check{Name: "db", MaxAge: time.Second, Refresh: true,
					Func: func(context.Context) error { return nil }}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.background {
				done := make(chan struct{})
				if err := h.lc.GoWrite("audit-row", 0, func(context.Context) error { close(done); return nil }); err != nil {
					t.Fatal(err)
				}
				recv(t, done, "the write to run")
			}
			if tc.closer {
				if err := h.lc.AddCloser("db", func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			send, results := stuckServer(t, h)
			send("/stuck")
			h.endWindow(time.Second)
			h.timers(1) // the HTTP drain's deadline
			// The cut line's "after" is that deadline less the teardown's
			// start, computed by the code, not measured by the test.
			h.clock.Advance(tc.httpEnd)
			if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run = %v, want the cut (exit 1)", err)
			}
			if err := recv(t, results, "the cut request"); err == nil {
				t.Fatal("the stuck request was answered; it should have been cut")
			}
			want := "HTTP drain cut 1 in-flight request(s) after " + tc.httpEnd.String() + ": GET /stuck"
			if !strings.Contains(h.logs.String(), want) {
				t.Fatalf("the log lacks %q:\n%s", want, h.logs)
			}
			if !tc.background && strings.Contains(h.logs.String(), "join done") {
				t.Fatalf("a join line for a service that started no background work:\n%s", h.logs)
			}
		})
	}
}

// "Cut requests are listed oldest first; after 20 the line ends with
// `, and N more`."
func TestCutRequestsOldestFirstAndCapped(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second})
	send, results := stuckServer(t, h)
	const n = 23
	for i := range n {
		send(fmt.Sprintf("/r%02d", i))
		h.clock.Advance(10 * time.Millisecond) // each request 10ms younger than the one before
	}
	h.endWindow(time.Second)
	h.timers(1)
	h.clock.Advance(3 * time.Second)
	if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want the cut (exit 1)", err)
	}
	for range n {
		recv(t, results, "a cut request")
	}
	var line string
	for l := range strings.Lines(h.logs.String()) {
		if strings.Contains(l, "HTTP drain cut") {
			line = l
		}
	}
	if !strings.Contains(line, fmt.Sprintf("HTTP drain cut %d in-flight request(s) after 3s: GET /r00 (age ", n)) {
		t.Fatalf("the cut line does not start with the oldest request: %s", line)
	}
	last := -1
	for i := range 20 {
		at := strings.Index(line, fmt.Sprintf("GET /r%02d (age ", i))
		if at < 0 || at < last {
			t.Fatalf("GET /r%02d missing or out of order (oldest first) in: %s", i, line)
		}
		last = at
	}
	for i := 20; i < n; i++ {
		if strings.Contains(line, fmt.Sprintf("/r%02d", i)) {
			t.Fatalf("the line names more than 20 requests (/r%02d): %s", i, line)
		}
	}
	if !strings.Contains(line, ", and 3 more") {
		t.Fatalf("the line does not end with \", and 3 more\": %s", line)
	}
}

// "A service that never started background work logs no join line at all."
func TestNoBackgroundWorkNoJoinLine(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second})
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
	if logs := h.logs.String(); strings.Contains(logs, "lameduck: join") || !strings.Contains(logs, "lameduck: stopped") {
		t.Fatalf("a service without background work logged a join line (or never stopped):\n%s", logs)
	}
}

// "Only GET, the kubelet's httpGet, drains: HEAD and every other method get
// 405 with Allow: GET and drain nothing." The right token is sent, so only
// the method refuses.
func TestPreStopOnlyGETDrains(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, PreStopToken: "s3cret-token-long-enough"})
	base := h.serve(okHandler)
	h.run()
	await(t, h.lc.Events().StartupDone)
	c := client(t)
	for _, m := range []string{"HEAD", "POST", "PUT", "DELETE"} {
		req, _ := http.NewRequest(m, base+"/prestop", nil)
		req.Header.Set("X-Lameduck-Token", "s3cret-token-long-enough")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
			t.Errorf("%s /prestop: %d Allow %q; want 405 Allow \"GET\"", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	if h.lc.Events().ShutdownInitiated.Fired() {
		t.Fatal("a method other than GET started the drain")
	}
	probeOf(t, h.lc, "/readyz").status(t, 200, "ok")
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// "In a pod that never became ready, it answers at once, with
// "window":"0s"" — on the fake clock: no time passes before the answer.
func TestPreStopBeforeReadyAnswersAtOnce(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second, PreStopToken: "s3cret-token-long-enough"})
	booting := make(chan struct{})
	h.lc.AddStartupTask("warm-up", func(ctx context.Context) error {
		close(booting)
		<-ctx.Done()
		return ctx.Err()
	})
	h.serve(okHandler)
	h.run()
	recv(t, booting, "the startup task to run")
	before := h.clock.Now()
	p := probeOf(t, h.lc, "/prestop", "X-Lameduck-Token", "s3cret-token-long-enough")
	if p.code != 200 || !strings.Contains(p.body, `"window":"0s"`) {
		t.Fatalf("GET /prestop before ready: %d %s; want 200 with \"window\":\"0s\"", p.code, p.body)
	}
	if now := h.clock.Now(); !now.Equal(before) {
		t.Fatalf("the hook answered after %s of (fake) time; want at once", now.Sub(before))
	}
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// "Only a signal after an earlier signal is a second signal. After GET
// /prestop, BeginShutdown, a cancelled context or a fatal error, the first
// signal is logged and ignored even with the setting on."
func TestSignalAfterANonSignalStartIsNoSecondSignal(t *testing.T) {
	for _, start := range []string{"BeginShutdown", "cancelled context", "fatal error"} {
		t.Run(start, func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: 4 * time.Second, ExitOnSecondSignal: true})
			lameduck.SetExit(h.lc, func(code int) { t.Errorf("exit(%d): the first signal after %s is no second signal", code, start) })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var fl failingListener
			if start == "fatal error" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				fl = failingListener{ln, make(chan struct{})}
				if err := h.lc.AddServer(&http.Server{Handler: okHandler}, fl); err != nil {
					t.Fatal(err)
				}
			} else {
				h.serve(okHandler)
			}
			h.done = make(chan error, 1)
			go func() { h.done <- h.lc.Run(ctx) }()
			await(t, h.lc.Events().StartupDone)
			switch start {
			case "BeginShutdown":
				h.lc.BeginShutdown("test")
			case "cancelled context":
				cancel()
			case "fatal error":
				close(fl.fail)
			}
			await(t, h.lc.Events().ShutdownInitiated)
			lameduck.Signal(h.lc, syscall.SIGTERM)
			if !strings.Contains(h.logs.String(), "SIGTERM ignored: the shutdown sequence runs to completion") {
				t.Fatalf("the signal was not logged as ignored:\n%s", h.logs)
			}
			h.timers(1)
			if n := h.clock.Advance(4*time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
				t.Fatalf("the signal shortened the window (%d timer(s) fired)", n)
			}
			h.clock.Advance(time.Nanosecond)
			err := h.wait()
			if (start == "fatal error") != (err != nil) {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}

// "With LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true, a second signal exits at once
// … level=ERROR msg="lameduck: second SIGINT: exiting now without finishing
// the drain" setting="LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true" in_flight=0".
func TestSecondSignalExitIsLogged(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 4 * time.Second, ExitOnSecondSignal: true})
	exited := make(chan int, 1)
	lameduck.SetExit(h.lc, func(code int) { exited <- code })
	h.serve(okHandler)
	h.run()
	await(t, h.lc.Events().StartupDone)
	lameduck.Signal(h.lc, syscall.SIGTERM)
	lameduck.Signal(h.lc, syscall.SIGTERM)
	if code := recv(t, exited, "exit"); code != 143 {
		t.Fatalf("exit(%d), want 143 (128 + SIGTERM)", code)
	}
	want := `level=ERROR msg="lameduck: second SIGTERM: exiting now without finishing the drain" setting="LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true" in_flight=0`
	if !strings.Contains(h.logs.String(), want) {
		t.Fatalf("the log lacks %s:\n%s", want, h.logs)
	}
	h.timers(1)
	h.clock.Advance(4 * time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// CheckDetails "hide" through the Lifecycle: "hide nowhere": even the
// probe-only listener, which shows the text by default, carries the outcome
// word alone, in every format; the log keeps the (redacted) text.
func TestCheckDetailsHideThroughTheLifecycle(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ProbeAddr: "127.0.0.1:0", CheckDetails: lameduck.CheckDetailsHide})
	if err := h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
		return errors.New("dial tcp orders-db.internal:5432: connection refused")
	}}); err != nil {
		t.Fatal(err)
	}
	h.run()
	await(t, h.lc.Events().StartupDone)
	addr := h.probeListener()
	c := client(t)
	for _, path := range []string{"/readyz", "/readyz/db", "/readyz?verbose"} {
		p := get(t, c, "http://"+addr+path)
		if p.code != 503 || strings.Contains(p.body, "orders-db") || strings.Contains(p.body, "5432") {
			t.Fatalf("GET %s on the probe-only listener with CheckDetails hide: %d %s; want 503 and no error text", path, p.code, p.body)
		}
		if !strings.Contains(p.body, `"db":"error"`) && !strings.Contains(p.body, "[-]db failed: error") {
			t.Fatalf("GET %s: %s; want the outcome word", path, p.body)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/readyz", nil)
	req.Header.Set("Accept", "application/health+json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(resp); strings.Contains(body, "orders-db") || !strings.Contains(body, `"status":"fail"`) {
		t.Fatalf("health+json with CheckDetails hide: %s; want fail and no error text", body)
	}
	if !strings.Contains(h.logs.String(), "orders-db.internal:5432") {
		t.Fatalf("the log lacks the detail:\n%s", h.logs)
	}
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// "Probe and /prestop requests are not application requests: they are not
// counted in flight, never cut, and do not keep the idle drain open." In
// idle mode, probes through the application's listener all along the
// window do not push its end out; and a probe in progress at the signal is
// not counted in the draining line's in_flight.
func TestProbesAreNotApplicationRequests(t *testing.T) {
	h := newHarness(t, idleConfig()) // delay 2s, idle window 3s
	entered, release := make(chan struct{}), make(chan struct{})
	if err := h.lc.AddCheck(health.Check{Name: "db", Timeout: time.Hour, Func: func(ctx context.Context) error {
		entered <- struct{}{}
		<-release
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	app := lameduck.Wrap(h.lc, okHandler)
	h.serve(app)
	h.run()
	await(t, h.lc.Events().StartupDone)
	probed := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		probed <- rec.Code
	}()
	recv(t, entered, "the probe's check to run")
	h.lc.BeginShutdown("test") // logs the draining line before it returns
	if !strings.Contains(h.logs.String(), "in_flight=0") {
		t.Fatalf("a probe in progress was counted in flight:\n%s", h.logs)
	}
	close(release)
	if code := recv(t, probed, "the probe's answer"); code != 200 {
		t.Fatalf("the probe begun while serving answered %d", code)
	}
	// Probes every 500ms through the window: the idle drain ends at the 2s
	// minimum all the same (traffic would push it to 3s after the last).
	for i := 0; i < 3; i++ {
		h.timers(1)
		h.clock.Advance(500 * time.Millisecond)
		for _, p := range []string{"/readyz", "/healthz", "/startupz", "/readyz/db"} {
			app.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
		}
	}
	h.advanceUntilWindowEnds(250*time.Millisecond, 30*time.Second, nil) // the drain's bound is 20s
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
	if got := windowLength(t, h.lc); got != 2*time.Second {
		t.Fatalf("window %s; want the 2s minimum: probes are not traffic", got)
	}
}

// "On a dedicated probe listener, any other path gets a JSON 404 not found."
func TestProbeOnlyListenerOtherPathsAre404(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ProbeAddr: "127.0.0.1:0"})
	h.serve(okHandler)
	h.run()
	await(t, h.lc.Events().StartupDone)
	addr := h.probeListener()
	c := client(t)
	for _, path := range []string{"/", "/api", "/prestop", "/metrics"} {
		get(t, c, "http://"+addr+path).status(t, 404, "not found")
	}
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
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
	h.run()
	await(t, h.lc.Events().StartupDone)
	logs := h.logs.String()
	if !strings.Contains(logs, "lameduck: the server on "+strings.TrimPrefix(bare, "http://")+" has no ReadHeaderTimeout") {
		t.Fatalf("no warning names the server without ReadHeaderTimeout:\n%s", logs)
	}
	if strings.Contains(logs, "the server on "+ln.Addr().String()+" has no ReadHeaderTimeout") {
		t.Fatalf("a server with ReadHeaderTimeout was warned about:\n%s", logs)
	}
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// A text/plain probe body, which echoes names from the request (an unknown
// ?exclude), carries X-Content-Type-Options: nosniff (docs/security.md).
func TestPlainTextProbeBodiesAreNosniff(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	if err := h.lc.AddCheck(health.Check{Name: "db", Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	h.serve(okHandler)
	h.run()
	await(t, h.lc.Events().StartupDone)
	rec := httptest.NewRecorder()
	h.lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz?verbose&exclude=%3Cscript%3E", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("?verbose: Content-Type %q; want text/plain", ct)
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Fatalf("?verbose: X-Content-Type-Options %q; want nosniff", got)
	}
	if !strings.Contains(rec.Body.String(), `no matches for "<script>"`) || rec.Code != 200 {
		t.Fatalf("?verbose&exclude=<script>: %d %s; want 200 and the unmatched name quoted", rec.Code, rec.Body)
	}
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// The endpoint table's stopping column "is visible only on a separate probe
// listener": while a request holds the teardown, the probe listener still
// answers (/readyz 503 draining, /healthz 200, phase stopping) and the
// application's listener is closed; the probe listener closes after the
// application's servers.
func TestStoppingVisibleOnTheProbeListener(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second, ProbeAddr: "127.0.0.1:0"})
	entered, release := make(chan struct{}), make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	appLn := notifyClose(ln)
	if err := h.lc.AddServer(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})}, appLn); err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	h.run()
	await(t, h.lc.Events().StartupDone)
	addr := h.probeListener()
	c := client(t)
	answered := make(chan error, 1)
	go func() {
		resp, err := c.Get(base + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	recv(t, entered, "the request to enter its handler")
	h.endWindow(time.Second)
	// Teardown closes the application's listener (the HTTP drain then
	// waits for the request in flight); the probe listener still answers,
	// in phase stopping. (The listener says when it is closed: a dial
	// expecting a refusal would depend on no other test binary binding the
	// freed port meanwhile.)
	recv(t, appLn.closed, "the teardown to close the application's listener")
	if h.lc.Events().HTTPDrained.Fired() {
		t.Fatal("the HTTP drain ended with a request in flight")
	}
	if got := h.lc.Phase(); got != lameduck.PhaseStopping {
		t.Fatalf("phase after the window = %s, want stopping", got)
	}
	probes := client(t)
	for path, want := range map[string]probe{"/readyz": {503, "draining"}, "/healthz": {200, "ok"}, "/startupz": {200, "ok"}} {
		p := get(t, probes, "http://"+addr+path)
		p.status(t, want.code, want.body)
		if !strings.Contains(p.body, `"phase":"stopping"`) {
			t.Fatalf("GET %s on the probe listener during teardown: %s; want phase stopping", path, p.body)
		}
	}
	close(release)
	if err := recv(t, answered, "the request's answer"); err != nil {
		t.Fatalf("the request in flight was not answered: %v", err)
	}
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
	// The probe listener is closed: its port can be bound again (a listener
	// still open would make this fail with "address already in use"; a dial
	// expecting a refusal would instead depend on no other test binary
	// binding the freed port first). Another process may have bound the
	// freed port first all the same: then the kernel's socket table tells
	// whether this process still listens there.
	again, err := net.Listen("tcp", addr)
	if err == nil {
		again.Close()
		return
	}
	if held, known := listeningHere(t, addr); known && !held {
		t.Logf("%s was taken by another process after the probe listener released it (%v); this process listens there no more", addr, err)
		return
	}
	t.Fatalf("the probe listener still holds %s after Run returned: %v", addr, err)
}

// listeningHere reports whether this process has a TCP socket listening on
// addr's port, from Linux's socket tables (/proc/net/tcp and tcp6) and this
// process's file descriptors; known is false where they cannot be read.
func listeningHere(t *testing.T, addr string) (held, known bool) {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(":%04X", p) // the local address column ends with the port in hex
	mine := map[string]bool{}       // this process's socket inodes
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false, false
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil {
			if inode, ok := strings.CutPrefix(l, "socket:["); ok {
				mine[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			return false, false
		}
		for line := range strings.Lines(string(b)) {
			// sl local_address rem_address st ... uid timeout inode
			f := strings.Fields(line)
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" && mine[f[9]] {
				return true, true
			}
		}
	}
	return false, true
}

// "If the sequence starts during boot, draining follows starting directly":
// the phase goes from starting to draining, and serving never happens.
func TestSequenceDuringBootGoesFromStartingToDraining(t *testing.T) {
	var mu sync.Mutex
	var phases []string // each phase an event led to, deduplicated
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second, OnTransition: func(tr lameduck.Transition) {
		if tr.Kind != lameduck.TransitionEvent {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p := tr.Phase.String(); len(phases) == 0 || phases[len(phases)-1] != p {
			phases = append(phases, p)
		}
	}})
	booting := make(chan struct{})
	h.lc.AddStartupTask("warm-up", func(ctx context.Context) error {
		close(booting)
		<-ctx.Done()
		return ctx.Err()
	})
	h.serve(okHandler)
	h.run()
	recv(t, booting, "the startup task to run")
	if got := h.lc.Phase(); got != lameduck.PhaseStarting {
		t.Fatalf("phase during boot = %s", got)
	}
	// Outside serving /readyz does not even look at the path.
	probeOf(t, h.lc, "/readyz/nope").status(t, 503, "starting")
	h.lc.BeginShutdown("test")
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
	if h.lc.Events().StartupDone.Fired() {
		t.Fatal("the pod passed through serving")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(phases, " → "); got != "draining → stopping → stopped" {
		t.Fatalf("phases after starting: %s; want draining → stopping → stopped", got)
	}
}

// "version and commit come from the binary's build information … unless
// Config.Version and Config.Commit override them"; Config.Fields are extra
// members of every body.
func TestVersionAndCommitFromConfig(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, Version: "v1.4.0", Commit: "0123abc",
		Fields: func() map[string]any { return map[string]any{"region": "eu-west-1"} }})
	h.serve(okHandler)
	h.run()
	await(t, h.lc.Events().StartupDone)
	for _, path := range []string{"/healthz", "/readyz", "/startupz"} {
		p := probeOf(t, h.lc, path)
		if !strings.HasPrefix(p.body, `{"status":"ok","version":"v1.4.0","commit":"0123abc",`) || !strings.Contains(p.body, `"region":"eu-west-1"`) {
			t.Fatalf("GET %s: %s; want status, then Config.Version and Config.Commit, and the field", path, p.body)
		}
	}
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// Parsing rules of the configuration: booleans as true/false, 1/0, t/f in
// lower, upper or title case; surrounding spaces trimmed; an empty value is
// unset; an unknown LAMEDUCK_ name is an error even when empty.
func TestSettingValuesParseAsDocumented(t *testing.T) {
	for _, v := range []string{"true", "TRUE", "True", "1", "t", "T", " true "} {
		lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SEND_RETRY_AFTER": v}, lameduck.Config{})
		if err != nil || !lc.Config().SendRetryAfter {
			t.Errorf("LAMEDUCK_SEND_RETRY_AFTER=%q: %v; want true", v, err)
		}
	}
	for _, v := range []string{"false", "FALSE", "False", "0", "f", "F"} {
		lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SEND_RETRY_AFTER": v}, lameduck.Config{})
		if err != nil || lc.Config().SendRetryAfter {
			t.Errorf("LAMEDUCK_SEND_RETRY_AFTER=%q: %v; want false", v, err)
		}
	}
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "  2s\t", "LAMEDUCK_CHECK_TIMEOUT": " "}, lameduck.Config{})
	if err != nil || lc.Config().ShutdownDelay != 2*time.Second || lc.Config().CheckTimeout != time.Second {
		t.Fatalf("spaces around 2s, a blank CHECK_TIMEOUT: %v %+v; want 2s and the 1s default", err, lc.Config())
	}
	if _, err := newFromEnv(t, map[string]string{"LAMEDUCK_SHUTDOWN_DELAYS": ""}, lameduck.Config{}); !errors.Is(err, lameduck.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "LAMEDUCK_SHUTDOWN_DELAYS") {
		t.Fatalf("an empty unknown LAMEDUCK_ name: %v; want an error naming it", err)
	}
}

// Teardown hooks run "for at most LAMEDUCK_HOOK_SHARE × T together …, and never
// past the HTTP drain's end, so in-flight requests always keep a share": with
// a share of 0.9 of T = 4s and a tail of 1s kept for a join and a closer, the
// hooks' deadline is the HTTP drain's end at 3s, not 3.6s.
func TestTeardownHooksNeverPastTheHTTPDrainsEnd(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 4 * time.Second, HookShare: 0.9})
	done := make(chan struct{})
	if err := h.lc.GoWrite("audit-row", 0, func(context.Context) error { close(done); return nil }); err != nil {
		t.Fatal(err)
	}
	recv(t, done, "the write to run")
	if err := h.lc.AddCloser("db", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A hook that ignores its context: whether one that returns ctx.Err() at
	// its deadline counts as an overrun depends on the clock (see the
	// closing note), so this one is still running at the deadline for sure.
	stuck, entered := make(chan struct{}), make(chan struct{})
	defer close(stuck)
	if err := h.lc.AddTeardownHook("dispatcher", func(context.Context) error { close(entered); <-stuck; return nil }); err != nil {
		t.Fatal(err)
	}
	h.serve(okHandler)
	h.run()
	await(t, h.lc.Events().StartupDone)
	h.endWindow(time.Second)
	recv(t, entered, "the hook to run")
	await(t, h.lc.Events().HTTPDrained) // nothing in flight: its deadline's timer is stopped
	h.timers(1)                         // the hook's deadline
	h.clock.Advance(3 * time.Second)
	err := h.wait()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"dispatcher"`) {
		t.Fatalf("Run = %v; want the hook's overrun (exit 1)", err)
	}
	if want := `teardown hook \"dispatcher\" overran the hooks' share 3s of the teardown budget`; !strings.Contains(h.logs.String(), want) {
		t.Fatalf("the log lacks %s (the HTTP drain's end, before 0.9 × 4s):\n%s", want, h.logs)
	}
}

// docs/security.md: the token is "never printed in a configuration error
// (LAMEDUCK_PRESTOP_TOKEN="(hidden)")" and "must be printable ASCII without
// surrounding spaces".
func TestPreStopTokenNeverPrintedInItsError(t *testing.T) {
	for _, tok := range []string{"s3cret\x01token-long-enough", "s3cret-tökén-long-enough"} {
		_, err := newFromEnv(t, map[string]string{"LAMEDUCK_PRESTOP_TOKEN": tok}, lameduck.Config{})
		if !errors.Is(err, lameduck.ErrInvalidConfig) || !strings.Contains(err.Error(), `LAMEDUCK_PRESTOP_TOKEN="(hidden)"`) {
			t.Fatalf("token %q: %v; want an error showing (hidden)", tok, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the error prints the token: %v", err)
		}
	}
	_, err := newFromEnv(t, nil, lameduck.Config{PreStopToken: " s3cret-token-long-enough "})
	if !errors.Is(err, lameduck.ErrInvalidConfig) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a token with surrounding spaces: %v; want refused, without printing it", err)
	}
}
