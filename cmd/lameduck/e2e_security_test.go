package main

// End-to-end tests of the probe surface on a public port (docs/security.md):
// the preStop hook's token, the check details a body may show, and slow
// clients at the drain, on the real binary.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// listeners waits until the process has logged both its listeners (with
// LAMEDUCK_PROBE_ADDR set) and returns the base URLs of the application's
// and of the probe-only one; p.base is the application's.
func (p *proc) listeners() (app, probes string) {
	p.t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		app, probes = "", ""
		p.mu.Lock()
		for _, l := range p.lines {
			if l.msg() != "lameduck: listening" {
				continue
			}
			addr, _ := l.rec["addr"].(string)
			if l.rec["probes"] == true {
				probes = "http://" + addr
			} else {
				app = "http://" + addr
			}
		}
		p.mu.Unlock()
		if app != "" && probes != "" {
			p.base = app
			return app, probes
		}
		if time.Now().After(deadline) || p.hasExited() {
			p.t.Fatalf("the process did not log two listeners:\n%s", p.output())
		}
		time.Sleep(pollEvery)
	}
}

// getAt sends GET base+path with headers and fails the test on an error.
func (p *proc) getAt(base, path string, hdr map[string]string) reply {
	p.t.Helper()
	saved := p.base
	p.base = base
	defer func() { p.base = saved }()
	r, err := p.doHeader(context.Background(), p.client, path, hdr)
	if err != nil {
		p.t.Fatalf("GET %s%s: %v", base, path, err)
	}
	return r
}

// The hook enabled on the application's port without a token: the process
// refuses to start, before it binds, naming both fixes.
func TestE2EPreStopWithoutTokenRefusesToStart(t *testing.T) {
	t.Parallel()
	p := startProc(t, env("LAMEDUCK_PRESTOP", "true"), "--addr", "127.0.0.1:0")
	code, _ := p.waitExit(startTimeout)
	if code == 0 {
		t.Fatal("exit code 0; want a startup error")
	}
	out := p.output()
	for _, w := range []string{"LAMEDUCK_PRESTOP_TOKEN", "LAMEDUCK_PROBE_ADDR", "X-Lameduck-Token"} {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not name %s:\n%s", w, out)
		}
	}
	if l, ok := p.findLog(func(l logLine) bool { return l.msg() == "lameduck: listening" }); ok {
		t.Errorf("the process bound a port: %s", l.raw)
	}
}

// With a token: an anonymous call and wrong tokens get 401 and never drain;
// the refusals are logged once, with the source address and never the
// token; the right token drains.
func TestE2EPreStopToken(t *testing.T) {
	t.Parallel()
	const token = "e2e-Secret-0123456789"
	p := startDemo(t, env("LAMEDUCK_PRESTOP_TOKEN", token, "LAMEDUCK_SHUTDOWN_DELAY", "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	for i, hdr := range []map[string]string{
		nil,
		{"X-Lameduck-Token": ""},
		{"X-Lameduck-Token": "guess-0042"},
		{"X-Lameduck-Token": token[:len(token)-1]},
		{"X-Lameduck-Token": token + "x"},
		{"X-Lameduck-Token": strings.ToUpper(token)},
		{"Authorization": "Bearer " + token},
	} {
		r := p.getAt(p.base, "/prestop", hdr)
		if r.code != http.StatusUnauthorized || strings.TrimSpace(r.raw) != `{"status":"unauthorized"}` {
			t.Fatalf("call %d (%v): %s; want a bare 401", i, hdr, r)
		}
	}
	// Nothing drained: readiness is still 200 ok.
	p.want("/readyz", 200, "ok")
	if n := strings.Count(p.output(), "/prestop refused"); n != 1 {
		t.Errorf("%d log lines for 7 refusals within a minute; want 1", n)
	}
	if l, ok := p.findLog(msgContains("/prestop refused")); !ok || !strings.HasPrefix(fmt.Sprint(l.rec["remote"]), "127.0.0.1:") {
		t.Errorf("the refusal's log line lacks the source address: %s", l.raw)
	}
	if strings.Contains(p.output(), token[:10]) || strings.Contains(p.output(), "guess-0042") {
		t.Errorf("a token reached the log:\n%s", p.output())
	}

	sent := time.Now()
	r := p.getAt(p.base, "/prestop", map[string]string{"X-Lameduck-Token": token})
	if r.code != 200 || r.status() != "draining" {
		t.Fatalf("GET /prestop with the token = %s; want 200 draining", r)
	}
	if took := time.Since(sent); took < time.Second {
		t.Errorf("the hook returned after %s; want it held for the 1s window", took)
	}
	// The kubelet's SIGTERM, after the hook. With nothing in flight the
	// process may have exited already, which is fine.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// On a probe-only port the hook works without a token, and the
// application's port does not serve it at all (the application's own 404).
func TestE2EPreStopOnProbePortNeedsNoToken(t *testing.T) {
	t.Parallel()
	p := startProc(t, env("LAMEDUCK_PRESTOP", "true", "LAMEDUCK_PROBE_ADDR", "127.0.0.1:0",
		"LAMEDUCK_SHUTDOWN_DELAY", "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"), "--addr", "127.0.0.1:0")
	app, probes := p.listeners()
	p.waitLog(`"lameduck: serving"`, startTimeout, msgContains("lameduck: serving"))
	if r := p.getAt(app, "/prestop", nil); r.code != http.StatusNotFound || r.status() == "draining" {
		t.Fatalf("GET /prestop on the application's port = %s; want the application's 404", r)
	}
	if r := p.getAt(probes, "/readyz", nil); r.code != 200 {
		t.Fatalf("GET /readyz on the probe port = %s; want 200 (nothing drained yet)", r)
	}
	r := p.getAt(probes, "/prestop", nil)
	if r.code != 200 || r.status() != "draining" {
		t.Fatalf("GET /prestop on the probe port without a token = %s; want 200 draining", r)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may have exited already: nothing was in flight
	if code, _ := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// A check fails with an error holding a DSN (user and password), a host, a
// port and a path. On the application's port no probe body carries any of
// them, in any format or path; on the probe-only port, or with
// LAMEDUCK_CHECK_DETAILS=show, the redacted detail is there; the log always
// has it, without the password.
func TestE2ECheckDetailsNeverOnTheApplicationPort(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer backend.Close()
	hostPort := strings.TrimPrefix(backend.URL, "http://")
	dsn := "http://orders_app:hunter2@" + hostPort + "/internal/orders-primary/status"
	args := []string{"--check-http", "orders=" + dsn + ",critical", "--simulate-check", "cache=ok"}
	// What must never reach a body on the application's port.
	secrets := []string{"hunter2", "orders_app", hostPort, "127.0.0.1", "/internal", "orders-primary", "503 Service Unavailable"}

	paths := []struct {
		path string
		hdr  map[string]string
	}{
		{"/readyz", nil},
		{"/readyz?verbose", nil},
		{"/readyz?verbose=1&exclude=cache", nil},
		{"/readyz", map[string]string{"Accept": "application/health+json"}},
		{"/readyz/orders", nil},
		{"/readyz/orders?verbose", nil},
		{"/readyz/orders", map[string]string{"Accept": "application/health+json"}},
		{"/readyz/nope", nil},
		{"/readyz/nope?verbose", nil},
		{"/healthz", nil},
		{"/livez", nil},
		{"/startupz", nil},
	}

	// The default: probes on the application's port.
	p := startChecks(t, env("LAMEDUCK_CHECK_DETAILS", ""), args...)
	for _, x := range paths {
		r := p.getAt(p.base, x.path, x.hdr)
		for _, s := range secrets {
			if strings.Contains(r.raw, s) {
				t.Errorf("application's port, GET %s %v carries %q: %s", x.path, x.hdr, s, r)
			}
		}
		if strings.HasPrefix(x.path, "/readyz/orders") || x.path == "/readyz" || strings.HasPrefix(x.path, "/readyz?") {
			if r.code != http.StatusServiceUnavailable || !strings.Contains(r.raw, "orders") {
				t.Errorf("application's port, GET %s %v = %s; want 503 naming the check", x.path, x.hdr, r)
			}
		}
	}
	if r := p.get("/readyz"); !strings.Contains(r.raw, `"orders":"error"`) || r.status() != "failed" {
		t.Errorf("GET /readyz = %s; want status failed and \"orders\":\"error\"", r)
	}
	if r := p.get("/readyz?verbose"); !strings.Contains(r.raw, "[-]orders failed: error\n") {
		t.Errorf("GET /readyz?verbose = %s; want the line \"[-]orders failed: error\"", r)
	}
	logged := func(p *proc) {
		t.Helper()
		out := p.output()
		if !strings.Contains(out, hostPort+"/internal/orders-primary/status") || !strings.Contains(out, "503 Service Unavailable") {
			t.Errorf("the log lacks the check's detail:\n%s", out)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("the password reached the log")
		}
	}
	logged(p)

	// Shown: on the probe-only port, and with CHECK_DETAILS=show.
	shown := func(what string, p *proc, base string) {
		t.Helper()
		for _, x := range paths[:7] {
			r := p.getAt(base, x.path, x.hdr)
			if x.path == "/readyz?verbose=1&exclude=cache" {
				continue
			}
			if !strings.Contains(r.raw, hostPort+"/internal/orders-primary/status") || !strings.Contains(r.raw, "503 Service Unavailable") {
				t.Errorf("%s, GET %s %v = %s; want the redacted detail", what, x.path, x.hdr, r)
			}
			if strings.Contains(r.raw, "hunter2") {
				t.Errorf("%s, GET %s %v carries the password: %s", what, x.path, x.hdr, r)
			}
		}
	}
	pp := startProc(t, env("LAMEDUCK_PROBE_ADDR", "127.0.0.1:0"), append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	_, probes := pp.listeners()
	pp.waitLog(`"lameduck: serving"`, startTimeout, msgContains("lameduck: serving"))
	shown("probe-only port", pp, probes)
	logged(pp)

	ps := startChecks(t, env("LAMEDUCK_CHECK_DETAILS", "show"), args...)
	shown("CHECK_DETAILS=show", ps, ps.base)
	logged(ps)

	// CHECK_DETAILS=hide hides them on the probe-only port too.
	ph := startProc(t, env("LAMEDUCK_PROBE_ADDR", "127.0.0.1:0", "LAMEDUCK_CHECK_DETAILS", "hide"), append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	_, probes = ph.listeners()
	ph.waitLog(`"lameduck: serving"`, startTimeout, msgContains("lameduck: serving"))
	for _, x := range paths {
		r := ph.getAt(probes, x.path, x.hdr)
		for _, s := range secrets {
			if strings.Contains(r.raw, s) {
				t.Errorf("CHECK_DETAILS=hide, probe port, GET %s %v carries %q: %s", x.path, x.hdr, s, r)
			}
		}
	}
}

// Slow clients on the probe port and on the application's port (headers
// sent a byte at a time; a probe whose declared body never finishes) cannot
// hold the drain: the process exits long before its teardown budget.
func TestE2ESlowClientsCannotHoldTheDrain(t *testing.T) {
	t.Parallel()
	const teardown = 30 * time.Second
	p := startProc(t, env("LAMEDUCK_PROBE_ADDR", "127.0.0.1:0", "LAMEDUCK_SHUTDOWN_DELAY", "0s",
		"LAMEDUCK_SHUTDOWN_TEARDOWN", teardown.String()), "--addr", "127.0.0.1:0")
	app, probes := p.listeners()
	p.waitLog(`"lameduck: serving"`, startTimeout, msgContains("lameduck: serving"))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// trickle writes head a byte at a time, then 'a' forever, every each;
	// going is closed after its fifth byte (or when the server closed it).
	var going []chan struct{}
	trickle := func(base, head string, each time.Duration) <-chan struct{} {
		done, started := make(chan struct{}), make(chan struct{})
		going = append(going, started)
		var once sync.Once
		mark := func() { once.Do(func() { close(started) }) }
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(done)
			defer mark()
			defer c.Close()
			go func() { _, _ = io.Copy(io.Discard, c) }() // read whatever comes
			for i := 0; ctx.Err() == nil; i++ {
				b := []byte{'a'}
				if i < len(head) {
					b = []byte{head[i]}
				}
				if _, err := c.Write(b); err != nil {
					return // the server closed it
				}
				if i == 4 {
					mark()
				}
				select {
				case <-time.After(each):
				case <-ctx.Done():
				}
			}
		}()
		return done
	}
	var slow []<-chan struct{}
	for _, base := range []string{probes, app} {
		// Headers, one byte every 200ms: never complete.
		slow = append(slow, trickle(base, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", 200*time.Millisecond))
		// A probe with a declared body that trickles in forever.
		slow = append(slow, trickle(base, "GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", 100*time.Millisecond))
	}
	// Every slow client is into its request.
	for _, g := range going {
		<-g
	}
	if r := p.getAt(probes, "/readyz", nil); r.code != 200 {
		t.Fatalf("GET /readyz on the probe port = %s; want 200", r)
	}

	sig := p.signal(syscall.SIGTERM)
	code, at := p.waitExit(teardown)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	took := at.Sub(sig)
	t.Logf("exited %s after SIGTERM, with slow clients on both ports", took)
	if took > teardown/2 {
		t.Errorf("the process exited %s after SIGTERM; the slow clients held the drain (teardown budget %s)", took, teardown)
	}
	if l, ok := p.findLog(msgContains("budget spent")); ok {
		t.Errorf("the drain spent its budget on slow clients: %s", l.raw)
	}
	stop()
	for _, d := range slow {
		<-d
	}
}

// /livez answers as /healthz does; renamed probe paths answer at their new
// place and leave the old ones to the application; a bad path stops the
// process before it binds, naming the variable.
func TestE2EProbePaths(t *testing.T) {
	t.Parallel()
	p := startDemo(t, nil)
	for _, path := range []string{"/healthz", "/livez"} {
		if r := p.want(path, 200, "ok"); r.body["phase"] != "serving" {
			t.Errorf("GET %s = %s; want 200 ok, phase serving", path, r)
		}
	}

	pr := startProc(t, env("LAMEDUCK_LIVENESS_PATHS", "/-/healthz,/-/livez", "LAMEDUCK_READINESS_PATH", "/-/readyz",
		"LAMEDUCK_STARTUP_PATH", "/-/startupz"), "--addr", "127.0.0.1:0", "--simulate-check", "db=ok")
	pr.listening()
	pr.waitLog(`"lameduck: serving"`, startTimeout, msgContains("lameduck: serving"))
	for _, path := range []string{"/-/healthz", "/-/livez", "/-/readyz", "/-/readyz/db", "/-/startupz"} {
		pr.want(path, 200, "ok")
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/readyz/db", "/startupz"} {
		if r := pr.get(path); r.code != http.StatusNotFound || r.status() != "" {
			t.Errorf("GET %s with the paths renamed = %s; want the application's own 404", path, r)
		}
	}

	bad := startProc(t, env("LAMEDUCK_READINESS_PATH", "readyz"), "--addr", "127.0.0.1:0")
	if code, _ := bad.waitExit(startTimeout); code == 0 {
		t.Fatal("a bad path: exit code 0; want a startup error")
	}
	if out := bad.output(); !strings.Contains(out, `LAMEDUCK_READINESS_PATH=\"readyz\"`) || !strings.Contains(out, `must begin with \"/\"`) {
		t.Errorf("the refusal does not name the variable, its value and the rule:\n%s", out)
	}
}
