package lameduck_test

// The probe surface: what /healthz, /readyz, /startupz and /prestop answer
// and to whom, on the application's listener and on a dedicated one.

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
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// "Only GET, the kubelet's httpGet, drains: HEAD and every other method get
// 405 with Allow: GET and drain nothing." The right token is sent, so only
// the method refuses.
func TestPreStopOnlyGETDrains(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, PreStopToken: "s3cret-token-long-enough"})
	base := h.serve(okHandler)
	h.start(t)
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
	h.waitOK(t)
}

// "In a pod that never became ready, it answers at once, with
// "window":"0s"" — on the fake clock: no time passes before the answer.
func TestPreStopBeforeReadyAnswersAtOnce(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second, PreStopToken: "s3cret-token-long-enough"})
	booting := h.startupUntilCancelled("warm-up")
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
	h.waitOK(t)
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
	h.start(t)
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
	h.logged(t, "orders-db.internal:5432", "the log lacks the detail")
	h.endWindow(time.Second)
	h.waitOK(t)
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
	h.start(t)
	probed := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		probed <- rec.Code
	}()
	recv(t, entered, "the probe's check to run")
	h.lc.BeginShutdown("test") // logs the draining line before it returns
	h.logged(t, "in_flight=0", "a probe in progress was counted in flight")
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
	h.waitOK(t)
	if got := windowLength(t, h.lc); got != 2*time.Second {
		t.Fatalf("window %s; want the 2s minimum: probes are not traffic", got)
	}
}

// "On a dedicated probe listener, any other path gets a JSON 404 not found."
func TestProbeOnlyListenerOtherPathsAre404(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ProbeAddr: "127.0.0.1:0"})
	h.serve(okHandler)
	h.start(t)
	addr := h.probeListener()
	c := client(t)
	for _, path := range []string{"/", "/api", "/prestop", "/metrics"} {
		get(t, c, "http://"+addr+path).status(t, 404, "not found")
	}
	h.endWindow(time.Second)
	h.waitOK(t)
}

// A text/plain probe body, which echoes names from the request (an unknown
// ?exclude), carries X-Content-Type-Options: nosniff (docs/security.md).
func TestPlainTextProbeBodiesAreNosniff(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	if err := h.lc.AddCheck(health.Check{Name: "db", Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	h.serve(okHandler)
	h.start(t)
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
	h.waitOK(t)
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
	h.start(t)
	addr := h.probeListener()
	c := client(t)
	answered := sendAsync(c, "GET", base+"/slow")
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
	h.waitOK(t)
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

// "version and commit come from the binary's build information … unless
// Config.Version and Config.Commit override them"; Config.Fields are extra
// members of every body.
func TestVersionAndCommitFromConfig(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, Version: "v1.4.0", Commit: "0123abc",
		Fields: func() map[string]any { return map[string]any{"region": "eu-west-1"} }})
	h.serve(okHandler)
	h.start(t)
	for _, path := range []string{"/healthz", "/readyz", "/startupz"} {
		p := probeOf(t, h.lc, path)
		if !strings.HasPrefix(p.body, `{"status":"ok","version":"v1.4.0","commit":"0123abc",`) || !strings.Contains(p.body, `"region":"eu-west-1"`) {
			t.Fatalf("GET %s: %s; want status, then Config.Version and Config.Commit, and the field", path, p.body)
		}
	}
	h.endWindow(time.Second)
	h.waitOK(t)
}
