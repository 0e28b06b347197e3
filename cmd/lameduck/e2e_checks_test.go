package main

// End-to-end tests of dependency checks (critical or degraded,
// concurrent under deadlines, immune to panics, wedged pings and probe
// storms) on the real `lameduck demo` binary, with --simulate-check,
// --check-tcp, --check-http and --check-dns.
//
// They reuse e2e_test.go's harness (startProc, listening, waitLog, waitExit,
// the log reader). As there, no test sleeps to synchronise: every wait is on
// a log line, a probe answer or the process's exit, under a deadline; the
// only pauses are a traffic cadence (a /healthz poll every 20ms, a
// /readyz/flap poll every 50ms). Timing bounds are generous for a loaded
// 2-core box but real.
//
// A process with failing checks never answers /readyz 200 "ok", so these
// tests do not use startDemo (which waits for exactly that): startChecks
// waits for the "serving" log line instead, which also leaves the first
// /readyz probe to the test (the wedged check's first answer differs from
// its later ones).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
)

const (
	stalledText = "stalled: an earlier probe's ping has not returned"
	verboseOK   = "readyz check passed"
	verboseFail = "readyz check failed"
)

// startChecks starts the demo on 127.0.0.1:0 with args and waits until it
// listens and has logged that it serves (phase serving, signal handler
// installed), without sending any probe. These tests read the checks'
// texts, so the bodies show them (LAMEDUCK_CHECK_DETAILS=show) unless env
// says otherwise; e2e_security_test.go holds what the default hides.
func startChecks(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	if _, set := env["LAMEDUCK_CHECK_DETAILS"]; !set {
		e := map[string]string{"LAMEDUCK_CHECK_DETAILS": "show"}
		for k, v := range env {
			e[k] = v
		}
		env = e
	}
	p := startProc(t, env, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	p.listening()
	p.waitLog(`"lameduck: serving"`, startTimeout, msgContains("lameduck: serving"))
	return p
}

// getHealthJSON sends GET path with Accept: application/health+json.
func (p *proc) getHealthJSON(path string) reply {
	p.t.Helper()
	r, err := p.doHeader(context.Background(), p.client, path, map[string]string{"Accept": "application/health+json"})
	if err != nil {
		p.t.Fatalf("GET %s (Accept: application/health+json): %v", path, err)
	}
	return r
}

// checksOf returns the "checks" map of a JSON readiness answer as strings,
// failing the test when there is none.
func checksOf(t *testing.T, what string, r reply) map[string]string {
	t.Helper()
	m, ok := r.body["checks"].(map[string]any)
	if !ok {
		t.Fatalf("%s = %s; want a JSON body with a \"checks\" map", what, r)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("%s: checks[%q] = %#v; want a string", what, k, v)
		}
		out[k] = s
	}
	return out
}

// healthJSONCheck returns the single element of checks[name] in an
// application/health+json answer.
func healthJSONCheck(t *testing.T, r reply, name string) map[string]any {
	t.Helper()
	checks, ok := r.body["checks"].(map[string]any)
	if !ok {
		t.Fatalf("health+json answer %s has no \"checks\" object", r)
	}
	arr, ok := checks[name].([]any)
	if !ok || len(arr) != 1 {
		t.Fatalf("health+json checks[%q] = %#v; want a one-element array", name, checks[name])
	}
	c, ok := arr[0].(map[string]any)
	if !ok {
		t.Fatalf("health+json checks[%q][0] = %#v; want an object", name, arr[0])
	}
	return c
}

// verboseLines returns the lines of a ?verbose answer, failing the test
// unless it is plain text.
func verboseLines(t *testing.T, what string, r reply) []string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("%s: Content-Type %q; want text/plain", what, ct)
	}
	if !strings.HasSuffix(r.raw, "\n") {
		t.Errorf("%s: the text does not end in a newline: %q", what, r.raw)
	}
	return strings.Split(strings.TrimSuffix(r.raw, "\n"), "\n")
}

func isFlapText(s string) bool {
	return s == "ok" || strings.HasPrefix(s, "error: simulated flap")
}

// 1. One check of each mode. /readyz answers 200 degraded in about
// max(ping) with the right word per check (timeout for the wedge on the
// first probe, stalled after); /readyz/<name>, the 404 for an unknown name,
// ?verbose, ?exclude= and application/health+json; a critical failure
// makes it 503 failed in every form.
//
// The check deadline is 5s (not the 1s default), so that "at the deadline"
// and "at once" are seconds apart: the second probe, which must not wait
// for the stalled check, has seconds of margin on a loaded machine.
func TestE2EChecksEveryMode(t *testing.T) {
	t.Parallel()
	const wedgeDeadline = 5 * time.Second // LAMEDUCK_CHECK_TIMEOUT below
	p := startChecks(t, env("LAMEDUCK_CHECK_TIMEOUT", "5s"),
		"--simulate-check", "db=ok,critical",
		"--simulate-check", "queue=ok",
		"--simulate-check", "cache=fail",
		"--simulate-check", "search=slow=200ms",
		"--simulate-check", "tracer=wedge",
		"--simulate-check", "boom=panic",
		"--simulate-check", "flap=flap=300ms",
	)
	// The critical failure, in a process of its own, started now so that
	// both boot together.
	pf := startChecks(t, nil, "--simulate-check", "db=fail,critical", "--simulate-check", "queue=ok")
	names := []string{"boom", "cache", "db", "flap", "queue", "search", "tracer"}

	// The first probe: the wedge's deadline is the longest ping.
	sent := time.Now()
	first := p.get("/readyz")
	took := first.at.Sub(sent)
	t.Logf("first /readyz answered in %s: %s", took, first)
	if first.code != http.StatusOK || first.status() != "degraded" {
		t.Fatalf("first GET /readyz = %s; want 200 degraded", first)
	}
	if first.body["phase"] != "serving" {
		t.Errorf("first GET /readyz: phase %v; want serving", first.body["phase"])
	}
	got := checksOf(t, "first GET /readyz", first)
	want := map[string]string{
		"db":     "ok",
		"queue":  "ok",
		"cache":  "error: simulated failure",
		"search": "ok",
		"tracer": "timeout: no answer within 5s",
		"boom":   "panic: simulated panic",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("first GET /readyz: checks[%q] = %q; want %q", name, got[name], w)
		}
	}
	if !isFlapText(got["flap"]) {
		t.Errorf("first GET /readyz: checks[\"flap\"] = %q; want \"ok\" or \"error: simulated flap…\"", got["flap"])
	}
	if len(got) != len(names) {
		t.Errorf("first GET /readyz: checks has %d entries (%v); want exactly %v", len(got), got, names)
	}
	// The probe answers at the wedged check's deadline, not before it and
	// not long after (max(ping) against sum(ping) is held by
	// TestE2EChecksConcurrentMaxNotSum, with a margin of whole seconds).
	if took < wedgeDeadline {
		t.Errorf("first GET /readyz answered in %s, before the wedged check's %s deadline", took, wedgeDeadline)
	}
	if took >= wedgeDeadline+3*time.Second {
		t.Errorf("first GET /readyz answered in %s; want it at the wedged check's %s deadline", took, wedgeDeadline)
	}

	// A later probe: the wedged ping is captive, reported stalled at once.
	sent = time.Now()
	second := p.get("/readyz")
	if second.code != http.StatusOK || second.status() != "degraded" {
		t.Fatalf("second GET /readyz = %s; want 200 degraded", second)
	}
	got = checksOf(t, "second GET /readyz", second)
	if got["tracer"] != stalledText {
		t.Errorf("second GET /readyz: checks[\"tracer\"] = %q; want %q", got["tracer"], stalledText)
	}
	if got["boom"] != "panic: simulated panic" || got["cache"] != "error: simulated failure" ||
		got["db"] != "ok" || got["queue"] != "ok" || got["search"] != "ok" || !isFlapText(got["flap"]) {
		t.Errorf("second GET /readyz: checks = %v; want the same words as the first, tracer stalled", got)
	}
	if d := second.at.Sub(sent); d >= wedgeDeadline {
		t.Errorf("second GET /readyz answered in %s; a stalled check must not be waited for (the slow check is 200ms)", d)
	}

	// One check alone.
	if r := p.want("/readyz/db", http.StatusOK, "ok"); !mapsEqual(checksOf(t, "GET /readyz/db", r), map[string]string{"db": "ok"}) {
		t.Errorf("GET /readyz/db = %s; want checks {\"db\":\"ok\"} alone", r)
	}
	if r := p.want("/readyz/cache", http.StatusOK, "degraded"); !mapsEqual(checksOf(t, "GET /readyz/cache", r),
		map[string]string{"cache": "error: simulated failure"}) {
		t.Errorf("GET /readyz/cache = %s; want checks {\"cache\":\"error: simulated failure\"} alone", r)
	}
	nope := p.want("/readyz/nope", http.StatusNotFound, "not found")
	if msg, _ := nope.body["error"].(string); !strings.Contains(msg, `"nope"`) {
		t.Errorf("GET /readyz/nope = %s; want an \"error\" naming \"nope\"", nope)
	}
	known, _ := nope.body["known"].([]any)
	var knownNames []string
	for _, k := range known {
		s, _ := k.(string)
		knownNames = append(knownNames, s)
	}
	if !slices.Equal(knownNames, names) {
		t.Errorf("GET /readyz/nope: known = %v; want %v", knownNames, names)
	}
	if _, ok := nope.body["checks"]; ok {
		t.Errorf("GET /readyz/nope = %s; an unknown name must run and report no check", nope)
	}

	// ?verbose: the Kubernetes API server's text report, in name order.
	v := p.get("/readyz?verbose")
	if v.code != http.StatusOK {
		t.Fatalf("GET /readyz?verbose = %s; want 200", v)
	}
	lines := verboseLines(t, "GET /readyz?verbose", v)
	wantLines := []string{
		"[-]boom failed: panic: simulated panic",
		"[-]cache failed: error: simulated failure",
		"[+]db ok",
		"", // flap: either form, checked below
		"[+]queue ok",
		"[+]search ok",
		"[-]tracer failed: " + stalledText,
		verboseOK,
	}
	if len(lines) != len(wantLines) {
		t.Fatalf("GET /readyz?verbose:\n%s\nwant %d lines like:\n%s", v.raw, len(wantLines), strings.Join(wantLines, "\n"))
	}
	for i, w := range wantLines {
		if w == "" {
			if lines[i] != "[+]flap ok" && !strings.HasPrefix(lines[i], "[-]flap failed: error: simulated flap") {
				t.Errorf("GET /readyz?verbose line %d = %q; want \"[+]flap ok\" or \"[-]flap failed: error: simulated flap…\"", i+1, lines[i])
			}
			continue
		}
		if lines[i] != w {
			t.Errorf("GET /readyz?verbose line %d = %q; want %q", i+1, lines[i], w)
		}
	}

	// ?exclude= leaves checks out.
	ex := p.get("/readyz?exclude=cache&exclude=tracer")
	if ex.code != http.StatusOK || ex.status() != "degraded" { // boom still panics
		t.Fatalf("GET /readyz?exclude=cache&exclude=tracer = %s; want 200 degraded (boom still fails)", ex)
	}
	got = checksOf(t, "GET /readyz?exclude=cache&exclude=tracer", ex)
	var gotNames []string
	for n := range got {
		gotNames = append(gotNames, n)
	}
	sort.Strings(gotNames)
	if want := []string{"boom", "db", "flap", "queue", "search"}; !slices.Equal(gotNames, want) {
		t.Errorf("GET /readyz?exclude=cache&exclude=tracer: checks %v; want exactly %v", gotNames, want)
	}

	// application/health+json.
	hj := p.getHealthJSON("/readyz")
	if hj.code != http.StatusOK {
		t.Fatalf("GET /readyz (health+json) = %s; want 200", hj)
	}
	if ct := hj.header.Get("Content-Type"); ct != "application/health+json" {
		t.Errorf("GET /readyz (health+json): Content-Type %q; want application/health+json", ct)
	}
	if hj.status() != "warn" || hj.body["output"] != "degraded" {
		t.Errorf("GET /readyz (health+json) = %s; want \"status\":\"warn\", \"output\":\"degraded\"", hj)
	}
	for _, tc := range []struct{ name, status, output string }{
		{"db", "pass", ""},
		{"queue", "pass", ""},
		{"search", "pass", ""},
		{"cache", "warn", "error: simulated failure"},
		{"boom", "warn", "panic: simulated panic"},
		{"tracer", "warn", stalledText},
	} {
		c := healthJSONCheck(t, hj, tc.name)
		if c["status"] != tc.status {
			t.Errorf("health+json checks[%q].status = %v; want %q", tc.name, c["status"], tc.status)
		}
		if out, _ := c["output"].(string); out != tc.output {
			t.Errorf("health+json checks[%q].output = %q; want %q", tc.name, out, tc.output)
		}
	}
	healthJSONCheck(t, hj, "flap")

	// flap alternates: both faces are seen within a few periods.
	seenOK, seenFail := false, false
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !(seenOK && seenFail) {
		r := p.get("/readyz/flap")
		c := checksOf(t, "GET /readyz/flap", r)["flap"]
		switch {
		case r.code == http.StatusOK && r.status() == "ok" && c == "ok":
			seenOK = true
		case r.code == http.StatusOK && r.status() == "degraded" && strings.HasPrefix(c, "error: simulated flap"):
			seenFail = true
		default:
			t.Fatalf("GET /readyz/flap = %s; want 200 ok or 200 degraded with a flap error", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("flap=300ms: within 10s saw ok=%v, failing=%v; want both", seenOK, seenFail)
		}
		<-tick.C
	}

	// A critical check failing: 503 failed in every form.
	r := pf.want("/readyz", http.StatusServiceUnavailable, "failed")
	if got := checksOf(t, "GET /readyz (critical failure)", r); !mapsEqual(got,
		map[string]string{"db": "error: simulated failure", "queue": "ok"}) {
		t.Errorf("GET /readyz (critical failure): checks %v; want db failing, queue ok", got)
	}
	pf.want("/readyz/db", http.StatusServiceUnavailable, "failed")
	pf.want("/readyz/queue", http.StatusOK, "ok")
	v = pf.get("/readyz?verbose")
	if v.code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz?verbose (critical failure) = %s; want 503", v)
	}
	if lines, want := verboseLines(t, "GET /readyz?verbose (critical failure)", v),
		[]string{"[-]db failed: error: simulated failure", "[+]queue ok", verboseFail}; !slices.Equal(lines, want) {
		t.Errorf("GET /readyz?verbose (critical failure):\n%s\nwant:\n%s", v.raw, strings.Join(want, "\n"))
	}
	hj = pf.getHealthJSON("/readyz")
	if hj.code != http.StatusServiceUnavailable || hj.status() != "fail" || hj.body["output"] != "failed" {
		t.Errorf("GET /readyz (health+json, critical failure) = %s; want 503 \"status\":\"fail\", \"output\":\"failed\"", hj)
	}
	if ct := hj.header.Get("Content-Type"); ct != "application/health+json" {
		t.Errorf("GET /readyz (health+json, critical failure): Content-Type %q; want application/health+json", ct)
	}
	if c := healthJSONCheck(t, hj, "db"); c["status"] != "fail" || c["output"] != "error: simulated failure" {
		t.Errorf("health+json checks[\"db\"] = %v; want status fail with output \"error: simulated failure\"", c)
	}
	if c := healthJSONCheck(t, hj, "queue"); c["status"] != "pass" {
		t.Errorf("health+json checks[\"queue\"] = %v; want status pass", c)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// 2. The process survives a panicking and a wedged check: /healthz stays
// 200 (and fast) while they run; the panic is logged once, with its stack,
// which never reaches a body; after SIGTERM /readyz is 503 draining without
// consulting any check, the process exits 0 within delay + teardown, and
// the log names the wedged ping still running at exit.
//
// The check deadline is 10s, so that "fast" has whole seconds of margin on
// both sides: a liveness probe that ran the wedged check would take 10s (or
// hit the client's timeout), one that runs none answers in milliseconds,
// and the bound between them (5s) is far above a stalled second of this
// process.
func TestE2EChecksPanicAndWedgeSurvived(t *testing.T) {
	t.Parallel()
	const delay, teardown = 2 * time.Second, 5 * time.Second
	const wedgeDeadline, slowPoll = 10 * time.Second, 5 * time.Second
	p := startChecks(t, env("LAMEDUCK_SHUTDOWN_DELAY", "2s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s",
		"LAMEDUCK_CHECK_TIMEOUT", "10s"),
		"--simulate-check", "db=ok,critical",
		"--simulate-check", "boom=panic",
		"--simulate-check", "tracer=wedge",
	)

	// Liveness, polled every 20ms on a client of its own while the checks
	// misbehave.
	type poll struct {
		sent time.Time
		took time.Duration
		code int
		err  error
	}
	hc := newClient(t, true)
	stop := make(chan struct{})
	var polls []poll
	var pollWG sync.WaitGroup
	pollWG.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			sent := time.Now()
			r, err := p.do(context.Background(), hc, "/healthz")
			polls = append(polls, poll{sent: sent, took: time.Since(sent), code: r.code, err: err})
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	stopPolling := sync.OnceFunc(func() { close(stop); pollWG.Wait() })
	defer stopPolling()

	// The first probe waits the wedged check's whole deadline, longer than
	// the harness's request timeout: it gets a client of its own.
	slowClient := newClient(t, true)
	slowClient.Timeout = wedgeDeadline + reqTimeout
	const probes = 5
	var firstSent, firstAnswered time.Time
	for i := range probes {
		cl := p.client
		if i == 0 {
			cl, firstSent = slowClient, time.Now()
		}
		r, err := p.do(context.Background(), cl, "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz #%d: %v", i+1, err)
		}
		if i == 0 {
			firstAnswered = r.at
		}
		if r.code != http.StatusOK || r.status() != "degraded" {
			t.Fatalf("GET /readyz #%d = %s; want 200 degraded", i+1, r)
		}
		c := checksOf(t, "GET /readyz", r)
		wantTracer := stalledText
		if i == 0 {
			wantTracer = "timeout: no answer within 10s"
		}
		if c["boom"] != "panic: simulated panic" || c["tracer"] != wantTracer || c["db"] != "ok" {
			t.Errorf("GET /readyz #%d: checks %v; want boom panic, tracer %q, db ok", i+1, c, wantTracer)
		}
		if strings.Contains(r.raw, "goroutine") || strings.Contains(r.raw, ".go:") {
			t.Errorf("GET /readyz #%d carries a stack: %s", i+1, r)
		}
	}
	if r := p.get("/readyz?verbose"); strings.Contains(r.raw, "goroutine") || strings.Contains(r.raw, ".go:") {
		t.Errorf("GET /readyz?verbose carries a stack: %s", r)
	}
	if r := p.getHealthJSON("/readyz"); strings.Contains(r.raw, "goroutine") || strings.Contains(r.raw, ".go:") {
		t.Errorf("GET /readyz (health+json) carries a stack: %s", r)
	}

	// The panic: logged once (a transition, not once per probe), with its
	// stack.
	panicked := p.logMatches(msgContains("health: check boom panicked"))
	if len(panicked) != 1 {
		t.Errorf("%d \"check boom panicked\" log lines after %d probes; want 1 (each transition logged once)", len(panicked), probes+2)
	} else {
		l, _ := p.findLog(msgContains("health: check boom panicked"))
		if st, _ := l.rec["stack"].(string); !strings.Contains(st, "goroutine") {
			t.Errorf("the panic's log line carries no stack: %s", l.raw)
		}
	}
	if n := len(p.logMatches(msgContains("health: check tracer is stalled"))); n != 1 {
		t.Errorf("%d \"check tracer is stalled\" log lines; want 1", n)
	}
	if p.hasExited() {
		t.Fatalf("the process exited after the panic")
	}

	sig := p.signal(syscall.SIGTERM)
	var dr reply
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if dr, err = p.do(context.Background(), p.client, "/readyz"); err != nil {
			t.Fatalf("GET /readyz %s after SIGTERM, before any 503 draining: %v", time.Since(sig), err)
		}
		if dr.code == http.StatusServiceUnavailable && dr.status() == "draining" {
			break
		}
		if dr.code != http.StatusOK || dr.status() != "degraded" {
			t.Fatalf("GET /readyz after SIGTERM = %s; want 200 degraded, then 503 draining", dr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 503 draining within 5s of SIGTERM")
		}
		time.Sleep(pollEvery)
	}
	stopPolling()
	if _, ok := dr.body["checks"]; ok {
		t.Errorf("GET /readyz while draining = %s; want no \"checks\": draining consults none", dr)
	}
	if dr.body["phase"] != "draining" {
		t.Errorf("GET /readyz while draining: phase %v; want draining", dr.body["phase"])
	}
	if v := p.get("/readyz?verbose"); v.code != http.StatusServiceUnavailable ||
		v.raw != "[-]draining\n"+verboseFail+"\n" {
		t.Errorf("GET /readyz?verbose while draining = %d %q; want 503 %q", v.code, v.raw, "[-]draining\n"+verboseFail+"\n")
	}
	if h := p.want("/healthz", http.StatusOK, "ok"); h.body["phase"] != "draining" {
		t.Errorf("GET /healthz = %s; want 200 in phase draining", h)
	}

	var slowest time.Duration
	during := 0 // polls sent and answered while the first /readyz waited for the wedge
	for _, pl := range polls {
		if pl.err != nil || pl.code != http.StatusOK {
			t.Errorf("GET /healthz sent %s after the start = %d %v; want 200 throughout", pl.sent.Sub(p.started), pl.code, pl.err)
		}
		slowest = max(slowest, pl.took)
		if pl.sent.After(firstSent) && pl.sent.Add(pl.took).Before(firstAnswered) {
			during++
		}
	}
	t.Logf("%d /healthz polls (%d inside the first /readyz's wait for the wedge), slowest %s", len(polls), during, slowest)
	if len(polls) < 3 {
		t.Errorf("only %d /healthz polls while the checks ran; want a steady stream", len(polls))
	}
	// A liveness probe that ran the wedged check would take its whole
	// deadline (10s); one that runs none answers in far less. And liveness
	// answered while readiness was held by the wedge.
	if slowest >= slowPoll {
		t.Errorf("the slowest /healthz took %s while a check was wedged; want it well under the check's %s deadline (liveness runs no check)", slowest, wedgeDeadline)
	}
	if during == 0 {
		t.Errorf("no /healthz was answered while the first /readyz waited %s for the wedged check; want liveness to answer meanwhile",
			firstAnswered.Sub(firstSent))
	}

	code, at := p.waitExit(delay + teardown + 5*time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0 (a wedged check's goroutine must not hold the exit)", code)
	}
	// No earlier than the window: sig is stamped before the signal was
	// sent and at after the exit was seen, so a stall can only lengthen
	// this. The upper bound on the process's own clock (draining line to
	// stopped line), free of this process's scheduling.
	if d := at.Sub(sig); d < delay {
		t.Errorf("exited %s after SIGTERM; want no earlier than the %s window", d, delay)
	}
	drained := p.waitLog(`"lameduck: draining"`, time.Second, msgContains("lameduck: draining")).at(t)
	stopped := p.waitLog(`"lameduck: stopped"`, time.Second, msgContains("lameduck: stopped")).at(t)
	if d := stopped.Sub(drained); d >= delay+teardown {
		t.Errorf("the process logged stopped %s after draining; want within delay + teardown = %s (the wedged ping must not hold the exit)", d, delay+teardown)
	}
	l, ok := p.findLog(msgContains("still running at exit"))
	if !ok {
		t.Fatalf("no log line says the wedged ping was still running at exit")
	}
	if l.rec["checks"] != "tracer" {
		t.Errorf("the \"still running at exit\" line names %v; want tracer alone: %s", l.rec["checks"], l.raw)
	}
}

// listenTCP starts a TCP listener on loopback that accepts and closes every
// connection. stop closes it to simulate an outage, while its port stays
// reserved until the test ends (testsupport.ListenHeld): a dial gets
// "connection refused", and no other process can take the freed port and
// answer in its place.
func listenTCP(t *testing.T) (addr string, stop func()) {
	t.Helper()
	return testsupport.TCPServer(t, func(c net.Conn) { c.Close() })
}

// httpServer starts an httptest server answering code to every request.
func httpServer(t *testing.T, code int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	return s
}

// 3. The stdlib checks against real endpoints: a TCP listener, an HTTP
// server and localhost's DNS answer 200 ok; with the listener closed the
// next probe is 503 failed with the dial's error; an HTTP dependency
// answering 500 degrades readiness with a text naming the status.
func TestE2EChecksRealStdlib(t *testing.T) {
	t.Parallel()
	addr, stopTCP := listenTCP(t)
	web := httpServer(t, http.StatusOK)
	broken := httpServer(t, http.StatusInternalServerError)

	p := startChecks(t, nil,
		"--check-tcp", "up="+addr+",critical",
		"--check-http", "web="+web.URL,
		"--check-dns", "local=localhost",
	)
	pb := startChecks(t, nil,
		"--check-http", "api="+broken.URL+"/healthz",
		"--check-tcp", "up="+addr+",critical",
	)

	r := p.want("/readyz", http.StatusOK, "ok")
	if got := checksOf(t, "GET /readyz", r); !mapsEqual(got, map[string]string{"up": "ok", "web": "ok", "local": "ok"}) {
		t.Fatalf("GET /readyz: checks %v; want up, web and local ok", got)
	}

	r = pb.want("/readyz", http.StatusOK, "degraded")
	got := checksOf(t, "GET /readyz (HTTP 500)", r)
	if !strings.HasPrefix(got["api"], "error:") || !strings.Contains(got["api"], "500 Internal Server Error") {
		t.Errorf("GET /readyz (HTTP 500): checks[\"api\"] = %q; want an \"error:\" naming 500 Internal Server Error", got["api"])
	}
	if got["up"] != "ok" {
		t.Errorf("GET /readyz (HTTP 500): checks[\"up\"] = %q; want ok", got["up"])
	}

	// The dependency goes away: the very next probe says so (nothing is
	// cached).
	stopTCP()
	r = p.want("/readyz", http.StatusServiceUnavailable, "failed")
	got = checksOf(t, "GET /readyz (listener closed)", r)
	if !strings.HasPrefix(got["up"], "error:") || !strings.Contains(got["up"], addr) {
		t.Errorf("GET /readyz (listener closed): checks[\"up\"] = %q; want an \"error:\" from dialling %s", got["up"], addr)
	}
	if !strings.Contains(got["up"], "connection refused") {
		t.Errorf("GET /readyz (listener closed): checks[\"up\"] = %q; want the dial's \"connection refused\" (the port stays reserved)", got["up"])
	}
	if got["web"] != "ok" || got["local"] != "ok" {
		t.Errorf("GET /readyz (listener closed): checks %v; want web and local still ok", got)
	}
	v := p.get("/readyz?verbose")
	if lines := verboseLines(t, "GET /readyz?verbose (listener closed)", v); v.code != http.StatusServiceUnavailable ||
		len(lines) != 4 || lines[0] != "[+]local ok" || lines[1] != "[-]up failed: "+got["up"] ||
		lines[2] != "[+]web ok" || lines[3] != verboseFail {
		t.Errorf("GET /readyz?verbose (listener closed) = %d:\n%s", v.code, v.raw)
	}
}

// 4. Credentials in a check's URL never reach a body: an HTTP check with
// user-info against a closed port (the brief's case: the transport's
// error), one against a server answering 500 (the check's own error text),
// and one with a token in the query string against the closed port (the
// standard library hides a password in user-info by itself, but not a
// query's token: that one only the engine's redaction removes).
func TestE2EChecksSecretsRedacted(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	broken := httpServer(t, http.StatusInternalServerError)
	closedHost := net.JoinHostPort("127.0.0.1", fmt.Sprint(testsupport.HoldPort(t, 0))) // refused, and no one else's
	closed := "http://user:" + secret + "@" + closedHost + "/"
	status := strings.Replace(broken.URL, "http://", "http://user:"+secret+"@", 1) + "/healthz"
	token := "http://" + closedHost + "/healthz?token=" + secret

	p := startChecks(t, nil,
		"--check-http", "db="+closed+",critical",
		"--check-http", "api="+status,
		"--check-http", "svc="+token,
	)
	r := p.want("/readyz", http.StatusServiceUnavailable, "failed")
	got := checksOf(t, "GET /readyz", r)
	for _, name := range []string{"db", "svc"} {
		if !strings.HasPrefix(got[name], "error:") || !strings.Contains(got[name], closedHost) {
			t.Errorf("checks[%q] = %q; want an \"error:\" naming %s (the port is closed)", name, got[name], closedHost)
		}
	}
	if !strings.HasPrefix(got["api"], "error:") || !strings.Contains(got["api"], "500") {
		t.Errorf("checks[\"api\"] = %q; want an \"error:\" naming the 500", got["api"])
	}

	bodies := map[string]reply{"GET /readyz": r}
	for _, path := range []string{"/readyz", "/readyz?verbose", "/readyz/db", "/readyz/api", "/readyz/svc",
		"/readyz/svc?verbose", "/readyz/nope"} {
		bodies["GET "+path] = p.get(path)
	}
	bodies["GET /readyz (health+json)"] = p.getHealthJSON("/readyz")
	bodies["GET /readyz/db (health+json)"] = p.getHealthJSON("/readyz/db")
	for what, b := range bodies {
		if strings.Contains(b.raw, secret) {
			t.Errorf("%s leaks the secret: %s", what, b)
		}
	}
	// Nor does the log (error text is redacted before it is logged, too).
	if out := p.output(); strings.Contains(out, secret) {
		t.Errorf("the log leaks the secret:\n%s", out)
	}
}

// 5. Malformed check flags end the process with exit 2 (a usage error)
// before it listens, and the output names the flag and the value.
func TestE2EChecksBadSpecsFailBeforeListening(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ flag, spec string }{
		{"--simulate-check", "db=bogus"},
		{"--simulate-check", "db"},
		{"--simulate-check", "db=slow=abc"},
		{"--check-tcp", "x=nohost"},
	} {
		t.Run(tc.flag+"="+tc.spec, func(t *testing.T) {
			t.Parallel()
			p := startProc(t, nil, "--addr", "127.0.0.1:0", tc.flag, tc.spec)
			code, at := p.waitExit(startTimeout)
			if code != exitUsage {
				t.Errorf("exit code %d; want %d", code, exitUsage)
			}
			if d := at.Sub(p.started); d >= 5*time.Second {
				t.Errorf("exited %s after the start; want at once", d)
			}
			out := p.output()
			if strings.Contains(out, "lameduck: listening") || strings.Contains(out, "lameduck: serving") {
				t.Errorf("the process got as far as listening:\n%s", out)
			}
			if !strings.Contains(out, tc.flag) {
				t.Errorf("the output does not name the flag %s:\n%s", tc.flag, out)
			}
			if !strings.Contains(out, tc.spec) {
				t.Errorf("the output does not name the value %q:\n%s", tc.spec, out)
			}
		})
	}
}

// 6. A probe storm: 100 concurrent GET /readyz against one 1s check all
// answer 200 after the ping and before a second one could have run, sharing
// pings (the health+json "time" of the check, when its verdict was observed,
// takes very few values), while /healthz answers without waiting for the
// ping. The bounds are orderings and whole pings, so a stalled second on a
// loaded machine cannot break them.
func TestE2EChecksProbeStormSharesPing(t *testing.T) {
	t.Parallel()
	const n, ping = 100, time.Second
	p := startChecks(t, env("LAMEDUCK_CHECK_TIMEOUT", "10s"), "--simulate-check", "slow=slow=1s")

	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: reqTimeout}

	// Open the connections first, so that the storm measures the probes.
	var warm sync.WaitGroup
	warmGate := make(chan struct{})
	warmErrs := make([]error, n)
	for i := range n {
		warm.Go(func() {
			<-warmGate
			_, warmErrs[i] = p.do(context.Background(), c, "/healthz")
		})
	}
	close(warmGate)
	warm.Wait()
	for _, err := range warmErrs {
		if err != nil {
			t.Fatalf("GET /healthz (warming up): %v", err)
		}
	}

	replies := make([]reply, n)
	errs := make([]error, n)
	var storm sync.WaitGroup
	gate := make(chan struct{})
	hdr := map[string]string{"Accept": "application/health+json"}
	for i := range n {
		storm.Go(func() {
			<-gate
			replies[i], errs[i] = p.doHeader(context.Background(), c, "/readyz", hdr)
		})
	}
	stormDone := make(chan struct{})
	start := time.Now()
	close(gate)
	go func() { storm.Wait(); close(stormDone) }()

	// Liveness during the storm, every 20ms on the harness's own client.
	var healthz []time.Time // when each /healthz was answered
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		h := p.get("/healthz")
		if h.code != http.StatusOK || h.status() != "ok" {
			t.Errorf("GET /healthz during the storm = %s; want 200 ok", h)
		}
		healthz = append(healthz, h.at)
		select {
		case <-stormDone:
			done = true
		case <-tick.C:
		}
	}

	var first, last time.Time
	times := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("storm GET /readyz #%d: %v", i, errs[i])
		}
		r := replies[i]
		if r.code != http.StatusOK || r.status() != "pass" {
			t.Fatalf("storm GET /readyz #%d = %s; want 200 \"status\":\"pass\"", i, r)
		}
		ch := healthJSONCheck(t, r, "slow")
		if ch["status"] != "pass" {
			t.Errorf("storm GET /readyz #%d: checks.slow = %v; want pass", i, ch)
		}
		at, _ := ch["time"].(string)
		times[at]++
		if r.at.After(last) {
			last = r.at
		}
		if first.IsZero() || r.at.Before(first) {
			first = r.at
		}
	}
	total := last.Sub(start)
	t.Logf("%d probes answered in %s; %d distinct ping results %v; %d /healthz during the storm",
		n, total, len(times), times, len(healthz))
	if total < ping {
		t.Errorf("the storm was answered in %s, before the %s ping could have returned", total, ping)
	}
	// Not a speed bound: more than three whole pings would mean probes
	// queued behind one another instead of sharing.
	if total >= 3*ping+2*time.Second {
		t.Errorf("the storm took %s to answer; want about one %s ping", total, ping)
	}
	// Shared pings: a ping that arrives while one is in flight joins it.
	// The arrivals spread over well under a second, so a few pings at
	// most, not one per probe.
	if len(times) > 3 {
		t.Errorf("%d distinct ping results among %d concurrent probes; want them to share pings (at most 3)", len(times), n)
	}
	// Liveness never waits for a readiness ping: a /healthz sent after the
	// storm began was answered before any storm probe could be.
	if len(healthz) == 0 || !healthz[0].Before(first) {
		t.Errorf("no /healthz was answered before the first storm probe (at %s); want liveness answered while the ping runs",
			first.Sub(start))
	}
}

// 7. max(ping), not sum(ping): five checks of 1s each answer after one
// ping and well before the 5s they would add up to (a bound that a stalled
// second cannot break).
func TestE2EChecksConcurrentMaxNotSum(t *testing.T) {
	t.Parallel()
	const ping, checks = time.Second, 5
	var args []string
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		args = append(args, "--simulate-check", name+"=slow=1s")
	}
	p := startChecks(t, env("LAMEDUCK_CHECK_TIMEOUT", "10s"), args...)
	sent := time.Now()
	r := p.want("/readyz", http.StatusOK, "ok")
	took := r.at.Sub(sent)
	t.Logf("five 1s checks answered in %s", took)
	if got := checksOf(t, "GET /readyz", r); len(got) != checks {
		t.Errorf("GET /readyz: checks %v; want %d", got, checks)
	}
	if took < ping {
		t.Errorf("answered in %s, before a %s ping could have returned", took, ping)
	}
	if took >= 3*ping {
		t.Errorf("answered in %s; want about max(ping) = %s, well under the sum %s", took, ping, checks*ping)
	}
}

// A ping budget per dependency, on the real binary: with
// LAMEDUCK_CHECK_MAX_AGE=1s, 1,000 probes from 10 concurrent clients ping
// the dependency at most once per second, plus the first: at most 3 pings
// when they take under 2s. It asserts the pings (read from the bodies'
// "simulated_pings"), never a duration: on a machine so loaded that the
// probes take longer, the bound is the same rule, one ping per MaxAge
// begun.
func TestE2ECheckMaxAgeBoundsPings(t *testing.T) {
	p := startChecks(t, map[string]string{"LAMEDUCK_CHECK_MAX_AGE": "1s"}, "--simulate-check", "db=ok,critical")
	var (
		mu       sync.Mutex
		maxPings float64
		bad      []string
	)
	start := time.Now()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
			defer c.CloseIdleConnections()
			for range 100 {
				r, err := p.do(context.Background(), c, "/readyz")
				mu.Lock()
				if err != nil || r.code != http.StatusOK || r.status() != "ok" {
					bad = append(bad, fmt.Sprint(r, err))
				} else if pings, ok := r.body["simulated_pings"].(map[string]any); ok {
					if n, _ := pings["db"].(float64); n > maxPings {
						maxPings = n
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if len(bad) > 0 {
		t.Fatalf("%d of 1000 probes not 200 ok, the first: %s", len(bad), bad[0])
	}
	if maxPings < 1 {
		t.Fatal(`no body carried "simulated_pings":{"db":N}`)
	}
	most := 3.0
	if took >= 2*time.Second {
		most = 2 + float64(took/time.Second) // the first, and one per MaxAge begun
	}
	t.Logf("1000 probes from 10 clients in %v: %v pings of db", took.Round(time.Millisecond), maxPings)
	if maxPings > most {
		t.Fatalf("1000 probes in %v pinged db %v times, want at most %v with LAMEDUCK_CHECK_MAX_AGE=1s", took.Round(time.Millisecond), maxPings, most)
	}
	if v := p.get("/readyz?verbose"); !strings.Contains(v.raw, "[+]db ok (age ") {
		t.Fatalf("verbose body without the result's age:\n%s", v.raw)
	}
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d\n%s", code, p.output())
	}
}
