package lameduck_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/lameducktest"
)

// refusedWithoutToken checks that LAMEDUCK_<setting>=true without a token,
// on the application's own listener, is refused at New with an error that
// names the setting and every fix, and that field, set in cfg alone, is
// refused too.
func refusedWithoutToken(t *testing.T, setting, field string, cfg lameduck.Config) {
	t.Helper()
	_, err := newFromEnv(t, map[string]string{"LAMEDUCK_" + setting: "true"}, lameduck.Config{})
	if !errors.As(err, new(*lameduck.ConfigError)) {
		t.Fatalf("%s=true alone: err = %v, want a *ConfigError", setting, err)
	}
	for _, w := range []string{`LAMEDUCK_` + setting + `="true"`, "LAMEDUCK_PRESTOP_TOKEN", "LAMEDUCK_PRESTOP_TOKEN_FILE", "LAMEDUCK_PROBE_ADDR", lameduck.PreStopTokenHeader} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
	if _, err := newFromEnv(t, nil, cfg); !errors.As(err, new(*lameduck.ConfigError)) {
		t.Errorf("%s alone: err = %v, want a *ConfigError", field, err)
	}
}

// The hook on the application's own listener without a token is refused at
// New, naming both fixes; with a token, or on the probe-only listener, it
// starts.
func TestPreStopNeedsTokenOnSharedListener(t *testing.T) {
	refusedWithoutToken(t, "PRESTOP", "Config.PreStop", lameduck.Config{PreStop: true})
	for _, vars := range []map[string]string{
		{"LAMEDUCK_PRESTOP": "true", "LAMEDUCK_PRESTOP_TOKEN": "s3cret"},
		{"LAMEDUCK_PRESTOP_TOKEN": "s3cret"},
		{"LAMEDUCK_PRESTOP": "true", "LAMEDUCK_PROBE_ADDR": "127.0.0.1:0"},
	} {
		lc, err := newFromEnv(t, vars, lameduck.Config{})
		if err != nil {
			t.Errorf("%v: %v", vars, err)
			continue
		}
		if !lc.Config().PreStop {
			t.Errorf("%v: the hook is off", vars)
		}
	}
}

// The token may come from a file (a mounted Secret): a trailing newline is
// dropped; a missing or empty file, both sources at once, or a token that
// no header can carry are errors, and no error ever prints the token.
func TestPreStopTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("token", "s3cret-from-file\n")
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": good}, lameduck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := lc.Config(); c.PreStopToken != "s3cret-from-file" || !c.PreStop {
		t.Fatalf("token %q prestop %v; want the file's content without its newline, hook on", c.PreStopToken, c.PreStop)
	}
	crlf := write("crlf", "s3cret-crlf\r\n")
	if lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": crlf}, lameduck.Config{}); err != nil || lc.Config().PreStopToken != "s3cret-crlf" {
		t.Fatalf("CRLF file: %v", err)
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		cfg  lameduck.Config
		want []string
	}{
		{"missing", map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": filepath.Join(dir, "nope")}, lameduck.Config{},
			[]string{"LAMEDUCK_PRESTOP_TOKEN_FILE=", "nope", "cannot read"}},
		{"empty", map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": write("empty", "\n")}, lameduck.Config{},
			[]string{"LAMEDUCK_PRESTOP_TOKEN_FILE=", "empty"}},
		{"unreadable (a directory)", map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": dir}, lameduck.Config{},
			[]string{"cannot read"}},
		{"both", map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": good, "LAMEDUCK_PRESTOP_TOKEN": "s3cret-env"}, lameduck.Config{},
			[]string{"LAMEDUCK_PRESTOP_TOKEN", "keep one"}},
		{"control character", map[string]string{"LAMEDUCK_PRESTOP_TOKEN": "s3cret\x01tail"}, lameduck.Config{},
			[]string{"LAMEDUCK_PRESTOP_TOKEN", "printable ASCII"}},
		{"newline inside a file", map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": write("two-lines", "s3cret-a\ns3cret-b\n")}, lameduck.Config{},
			[]string{"LAMEDUCK_PRESTOP_TOKEN_FILE", "printable ASCII"}},
		{"code", nil, lameduck.Config{PreStopToken: "s3cret\ttab"}, []string{"Config.PreStopToken", "printable ASCII"}},
		{"a space a header would drop", map[string]string{"LAMEDUCK_PRESTOP_TOKEN_FILE": write("spaced", "s3cret-spaced \n")}, lameduck.Config{},
			[]string{"LAMEDUCK_PRESTOP_TOKEN_FILE", "surrounding spaces"}},
	} {
		_, err := newFromEnv(t, tc.vars, tc.cfg)
		if !errors.As(err, new(*lameduck.ConfigError)) {
			t.Errorf("%s: err = %v, want a *ConfigError", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error prints the token: %q", tc.name, err)
		}
	}
}

// Refused calls never drain, answer a bare 401, and are logged at most once
// a minute (on the injected clock) with their source and a count, never
// with the header's value.
func TestPreStopRefusedLoggedOncePerMinute(t *testing.T) {
	var fields atomic.Int32
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, PreStopToken: "s3cret-token",
		Fields: func() map[string]any { fields.Add(1); return nil }})
	base := h.serve(http.NotFoundHandler())
	h.start(t)
	c := client(t)
	// try is safe on any goroutine; call, on the test's only.
	try := func(tok string) reply {
		req, _ := http.NewRequest("GET", base+"/prestop", nil)
		if tok != "" {
			req.Header.Set(lameduck.PreStopTokenHeader, tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			return reply{err: err}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			return reply{err: errors.New("401 without WWW-Authenticate")}
		}
		return reply{probe: probe{resp.StatusCode, string(b)}}
	}
	call := func(tok string) probe {
		t.Helper()
		r := try(tok)
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.probe
	}
	for i := range 50 {
		tok := ""
		if i%2 == 1 {
			tok = "guess-" + strings.Repeat("x", i) // wrong, of every length
		}
		if p := call(tok); p.code != 401 || p.body != `{"status":"unauthorized"}`+"\n" {
			t.Fatalf("call %d: %d %q; want a bare 401", i, p.code, p.body)
		}
	}
	if p := call("s3cret-toke"); p.code != 401 { // a prefix of the token
		t.Fatalf("a prefix of the token: %d", p.code)
	}
	if h.lc.Events().ShutdownInitiated.Fired() {
		t.Fatal("a refused call drained the pod")
	}
	if n := fields.Load(); n != 0 {
		t.Fatalf("refused calls computed the application's fields %d times", n)
	}
	count := func() int { return strings.Count(h.logs.String(), "/prestop refused") }
	if n := count(); n != 1 {
		t.Fatalf("%d log lines for 51 refusals in the same minute; want 1:\n%s", n, h.logs)
	}
	h.clock.Advance(59 * time.Second)
	call("")
	if n := count(); n != 1 {
		t.Fatalf("%d log lines after 59s; want still 1", n)
	}
	h.clock.Advance(time.Second)
	call("")
	if n := count(); n != 2 || !strings.Contains(h.logs.String(), "refused=52") || !strings.Contains(h.logs.String(), "remote=127.0.0.1:") {
		t.Fatalf("after a minute: want a second line counting 52 refusals with the source address:\n%s", h.logs)
	}
	if strings.Contains(h.logs.String(), "guess-") || strings.Contains(h.logs.String(), "s3cret") {
		t.Fatalf("a token reached the log:\n%s", h.logs)
	}
	hook := make(chan reply, 1)
	go func() { hook <- try("s3cret-token") }()
	await(t, h.lc.Events().ShutdownInitiated)
	h.timers(1)
	h.clock.Advance(time.Second)
	if p := recv(t, hook, "the hook's answer"); p.err != nil || p.code != 200 {
		t.Fatalf("the right token: %d %s (%v)", p.code, p.body, p.err)
	}
	h.waitOK(t)
}

// On the probe-only listener the hook needs no token and bodies keep the
// detail; on the application's listener, the hook is not served and bodies
// carry names and words only. The log has the detail either way.
func TestProbeOnlyListenerKeepsDetails(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ProbeAddr: "127.0.0.1:0", PreStop: true})
	h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
		return errors.New("dial tcp db.internal:5432: connection refused")
	}})
	own := h.serve(http.NotFoundHandler())
	h.start(t)
	addr := h.probeListener()
	c := client(t)
	p := get(t, c, "http://"+addr+"/readyz")
	p.status(t, 503, "failed")
	if !strings.Contains(p.body, "db.internal:5432") {
		t.Fatalf("probe-only listener: %s; want the detail", p.body)
	}
	// ProbeHandler stands for the application's listener.
	p = probeOf(t, h.lc, "/readyz")
	p.status(t, 503, "failed")
	if strings.Contains(p.body, "db.internal") || !strings.Contains(p.body, `"db":"error"`) {
		t.Fatalf("ProbeHandler: %s; want the word alone", p.body)
	}
	if p := probeOf(t, h.lc, "/prestop"); p.code != 404 || h.lc.Events().ShutdownInitiated.Fired() {
		t.Fatalf("ProbeHandler /prestop without a token: %d, drained %v; want 404, nothing drained", p.code, h.lc.Events().ShutdownInitiated.Fired())
	}
	if p := get(t, c, own+"/prestop"); p.code != 404 {
		t.Fatalf("the application's /prestop: %d; want the application's own 404", p.code)
	}
	h.logged(t, "db.internal:5432", "the log lacks the detail")
	hook := getAsync(c, "http://"+addr+"/prestop")
	await(t, h.lc.Events().ShutdownInitiated)
	h.timers(1)
	h.clock.Advance(time.Second)
	if p := recv(t, hook, "the hook's answer"); p.err != nil || p.code != 200 {
		t.Fatalf("probe-only /prestop without a token: %d (%v); want 200", p.code, p.err)
	}
	h.waitOK(t)
}

func TestCheckDetailsSetting(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		cfg  lameduck.Config
		want string
	}{
		{nil, lameduck.Config{}, lameduck.CheckDetailsAuto},
		{map[string]string{"LAMEDUCK_CHECK_DETAILS": "Show"}, lameduck.Config{}, lameduck.CheckDetailsShow},
		{map[string]string{"LAMEDUCK_CHECK_DETAILS": "hide"}, lameduck.Config{}, lameduck.CheckDetailsHide},
		{nil, lameduck.Config{CheckDetails: "Hide"}, lameduck.CheckDetailsHide},
		{map[string]string{"LAMEDUCK_CHECK_DETAILS": "show"}, lameduck.Config{CheckDetails: "auto"}, lameduck.CheckDetailsAuto},
	} {
		lc, err := newFromEnv(t, tc.vars, tc.cfg)
		if err != nil {
			t.Fatalf("%v: %v", tc.vars, err)
		}
		if c := lc.Config(); c.CheckDetails != tc.want {
			t.Errorf("%v %+v: CheckDetails %q; want %q", tc.vars, tc.cfg, c.CheckDetails, tc.want)
		}
	}
	for _, tc := range []struct {
		vars map[string]string
		cfg  lameduck.Config
		want string
	}{
		{map[string]string{"LAMEDUCK_CHECK_DETAILS": "verbose"}, lameduck.Config{}, `LAMEDUCK_CHECK_DETAILS="verbose": not one of the choices; set it to "auto" or "show" or "hide"`},
		{nil, lameduck.Config{CheckDetails: "all"}, `Config.CheckDetails=all`},
	} {
		if _, err := newFromEnv(t, tc.vars, tc.cfg); !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: %v; want %q", tc.vars, tc.cfg, err, tc.want)
		}
	}
}

// /livez answers as /healthz does; every probe path can be renamed, and a
// renamed one leaves the old path to the application.
func TestProbePaths(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	for _, p := range []string{"/healthz", "/livez"} {
		probeOf(t, h.lc, p).status(t, 200, "ok")
	}

	lc, err := newFromEnv(t, map[string]string{
		"LAMEDUCK_LIVENESS_PATHS": "/-/live, /-/healthz",
		"LAMEDUCK_READINESS_PATH": "/-/ready",
		"LAMEDUCK_STARTUP_PATH":   "/-/startup",
		"LAMEDUCK_PRESTOP_PATH":   "/-/prestop",
		"LAMEDUCK_PRESTOP_TOKEN":  "s3cret",
	}, lameduck.Config{IgnoreSignals: true, ShutdownDelay: lameduck.NoDelay, Clock: h.clock, Logger: h.lc.Config().Logger})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lc.AddServer(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })}, ln)
	wait := lameducktest.Start(t, lc)
	base := "http://" + ln.Addr().String()
	c := client(t)
	for _, p := range []string{"/-/live", "/-/healthz", "/-/ready", "/-/startup"} {
		get(t, c, base+p).status(t, 200, "ok")
	}
	get(t, c, base+"/-/prestop").status(t, 401, "unauthorized")
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/readyz/db", "/startupz", "/prestop", "/-/ready2", "/-/readyz"} {
		if got := get(t, c, base+p); got.code != 299 {
			t.Errorf("GET %s = %d; want the application's 299", p, got.code)
		}
	}
	lc.BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		vars map[string]string
		cfg  lameduck.Config
		want string
	}{
		{map[string]string{"LAMEDUCK_READINESS_PATH": "ready"}, lameduck.Config{}, `LAMEDUCK_READINESS_PATH="ready": it must begin with "/"`},
		{map[string]string{"LAMEDUCK_READINESS_PATH": "/"}, lameduck.Config{}, `every path of the application`},
		{map[string]string{"LAMEDUCK_STARTUP_PATH": "/a/../b"}, lameduck.Config{}, `not clean`},
		{map[string]string{"LAMEDUCK_STARTUP_PATH": "/readyz/"}, lameduck.Config{}, `not clean`},
		{map[string]string{"LAMEDUCK_STARTUP_PATH": "/start?x=1"}, lameduck.Config{}, `'?'`},
		{map[string]string{"LAMEDUCK_LIVENESS_PATHS": "/healthz,,/livez"}, lameduck.Config{}, `LAMEDUCK_LIVENESS_PATHS="/healthz,,/livez": "": empty`},
		{map[string]string{"LAMEDUCK_LIVENESS_PATHS": "/readyz/live"}, lameduck.Config{}, `LAMEDUCK_LIVENESS_PATHS="/readyz/live": under LAMEDUCK_READINESS_PATH=/readyz`},
		{map[string]string{"LAMEDUCK_STARTUP_PATH": "/healthz"}, lameduck.Config{}, `the same path as LAMEDUCK_LIVENESS_PATHS`},
		{nil, lameduck.Config{LivenessPaths: []string{}}, `Config.LivenessPaths=[]: empty`},
		{nil, lameduck.Config{PreStopPath: "/readyz", PreStopToken: "s3cret"}, `the same path as LAMEDUCK_READINESS_PATH`},
	} {
		if _, err := newFromEnv(t, tc.vars, tc.cfg); !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: %v\nwant %q", tc.vars, tc.cfg, err, tc.want)
		}
	}
}

// A probe request that declares a body and then trickles it cannot hold its
// connection: no probe reads a body, and the connection closes after the
// answer, on a server without any timeout of its own.
func TestProbeWithTrickledBodyClosed(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	base := h.serve(http.NotFoundHandler())
	h.start(t)
	conn := dial(t, base)
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("%d, close %v; want 200 and Connection: close", resp.StatusCode, resp.Close)
	}
	// The server closed it: a read ends, before our 10s guard.
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection is still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection was held open until our guard")
	}
	h.lc.BeginShutdown("test")
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

// A token short enough to guess is accepted with a warning at Run, which
// never prints it.
func TestWeakTokenWarned(t *testing.T) {
	for _, tc := range []struct {
		token string
		warn  bool
	}{{"s3cret", true}, {"0123456789abcdef", false}} {
		h := started(t, lameduck.Config{ShutdownDelay: lameduck.NoDelay, PreStopToken: tc.token})
		h.lc.BeginShutdown("test")
		h.waitOK(t)
		if got := strings.Contains(h.logs.String(), "the preStop token is"); got != tc.warn {
			t.Errorf("token of %d characters: warned %v, want %v:\n%s", len(tc.token), got, tc.warn, h.logs)
		}
		if strings.Contains(h.logs.String(), tc.token) {
			t.Errorf("the token reached the log:\n%s", h.logs)
		}
	}
}

// A flood of readiness probes over real connections on the application's
// port shares one ping (the engine's own test holds it at 10,000 concurrent
// probes, exactly): 1,000 clients, each on its own connection, all waiting
// on one slow check, cost one ping (a handful at most: a client whose
// request is read as the ping returns starts the next one).
func TestProbeFloodOverHTTPSharesOnePing(t *testing.T) {
	const clients = 1000
	h := newHarness(t, lameduck.Config{ShutdownDelay: lameduck.NoDelay, CheckTimeout: time.Minute})
	var pings, active atomic.Int32
	release := make(chan struct{})
	h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(ctx context.Context) error {
		pings.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	allIn := make(chan struct{})
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			// StateActive: the request has been read; the probe is about
			// to join the ping.
			if st == http.StateActive && active.Add(1) == clients {
				close(allIn)
			}
		}}
	if err := h.lc.AddServer(srv, ln); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	tr := &http.Transport{DisableKeepAlives: true, MaxIdleConns: -1}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	codes := make(chan int, clients)
	for range clients {
		go func() {
			resp, err := c.Get("http://" + ln.Addr().String() + "/readyz")
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	select {
	case <-allIn:
	case <-time.After(time.Minute):
		t.Fatalf("only %d of %d requests were read within a minute", active.Load(), clients)
	}
	close(release)
	for range clients {
		if code := recv(t, codes, "a probe's answer"); code != 200 {
			t.Fatalf("a probe answered %d", code)
		}
	}
	n := pings.Load()
	t.Logf("%d concurrent probes over %d connections: %d ping(s)", clients, clients, n)
	if n > 5 {
		t.Fatalf("%d concurrent probes caused %d pings; want them to share one", clients, n)
	}
	h.lc.BeginShutdown("test")
	h.waitOK(t)
}

// docs/security.md: the token is "never printed in a configuration error
// (LAMEDUCK_PRESTOP_TOKEN="(hidden)")" and "must be printable ASCII without
// surrounding spaces".
func TestPreStopTokenNeverPrintedInItsError(t *testing.T) {
	for _, tok := range []string{"s3cret\x01token-long-enough", "s3cret-tökén-long-enough"} {
		_, err := newFromEnv(t, map[string]string{"LAMEDUCK_PRESTOP_TOKEN": tok}, lameduck.Config{})
		if !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), `LAMEDUCK_PRESTOP_TOKEN="(hidden)"`) {
			t.Fatalf("token %q: %v; want an error showing (hidden)", tok, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the error prints the token: %v", err)
		}
	}
	_, err := newFromEnv(t, nil, lameduck.Config{PreStopToken: " s3cret-token-long-enough "})
	if !errors.As(err, new(*lameduck.ConfigError)) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a token with surrounding spaces: %v; want refused, without printing it", err)
	}
}
