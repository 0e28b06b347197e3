package main

// End-to-end tests of background work that finishes inside the
// grace period) on the real `lameduck demo` binary: writes started during
// the window are joined under one budget and the overrun is named once;
// loops stop at the signal and new ones are refused with a reason.

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// post sends POST path on c and fails the test on a transport error.
func (p *proc) post(c *http.Client, path string) fetched {
	p.t.Helper()
	r, err := fetch(context.Background(), c, http.MethodPost, p.base+path)
	if err != nil {
		p.t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

// logIndex returns the index of the first output line that matches, or -1.
func (p *proc) logIndex(match func(logLine) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.lines {
		if match(l) {
			return i
		}
	}
	return -1
}

// logMatches returns the indexes of every output line that matches.
func (p *proc) logMatches(match func(logLine) bool) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i, l := range p.lines {
		if match(l) {
			out = append(out, i)
		}
	}
	return out
}

func writeDone(task string) func(logLine) bool {
	return func(l logLine) bool { return l.msg() == "demo: write done" && l.rec["task"] == task }
}

// 10. Three writes started during the 3s window — two of 5s, one of 30s —
// with a join budget of 6s: the two short ones are still running when the
// join begins and end inside it (their "write done" lines come before the
// join's verdict), the warning names the long one once with its count, and
// the process exits within delay + teardown. Each margin is whole seconds,
// so a stalled second on a loaded machine changes no outcome: a write sent
// at any time in the window (it must arrive before the listener closes)
// outlives the window by at least 2s and ends at least 1s before the join's
// verdict (window + 6s).
func TestE2EJoinNamesTheWriteThatOverran(t *testing.T) {
	t.Parallel()
	const delay, teardown = 3 * time.Second, 15 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "3s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "15s",
		"LAMEDUCK_JOIN_BUDGET", "6s"))
	c := newClient(t, false)

	sig := p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)
	// Send the three at once, early in the window.
	paths := []string{
		"/write?name=audit-row&d=5s",
		"/write?name=audit-row&d=5s",
		"/write?name=invite-email&d=30s",
	}
	replies := make([]fetched, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, path := range paths {
		wg.Go(func() {
			replies[i], errs[i] = fetch(context.Background(), c, http.MethodPost, p.base+path)
		})
	}
	wg.Wait()
	for i, path := range paths {
		if errs[i] != nil {
			t.Fatalf("POST %s during the %s window: %v", path, delay, errs[i])
		}
		if r := replies[i]; r.code != http.StatusAccepted {
			t.Fatalf("POST %s %s after SIGTERM = %s; want 202 (writes are still started while the pod drains)",
				path, r.at.Sub(sig), r)
		}
	}

	code, at := p.waitExit(delay + teardown + 15*time.Second)
	if code != 1 {
		t.Errorf("exit code %d; want 1: a write abandoned at the join is lost work, and the exit code says so", code)
	}
	if d := at.Sub(sig); d >= delay+teardown+3*time.Second {
		t.Errorf("exited %s after SIGTERM; want within delay + teardown = %s", d, delay+teardown)
	}
	if code == 0 {
		t.Errorf("exit code 0 with a write abandoned; want non-zero, so the exit code tells the truth")
	}

	const want = "join: 6s spent; still running: invite-email ×1 — abandoned at exit after the cap LAMEDUCK_JOIN_BUDGET; raise or unset LAMEDUCK_JOIN_BUDGET"
	joinAt := p.logIndex(msgContains("join: "))
	if joinAt < 0 {
		t.Fatalf("no join line in the log; want a warning %q", want)
	}
	l, _ := p.findLog(msgContains("join: "))
	if !strings.Contains(l.msg(), want) {
		t.Errorf("the join line says %q; want %q", l.msg(), want)
	}
	if n, _ := l.rec["joined"].(float64); n != 2 {
		t.Errorf("the join line has joined=%v; want 2 (the two audit-row writes): %s", l.rec["joined"], l.raw)
	}
	if n := len(p.logMatches(msgContains("join: "))); n != 1 {
		t.Errorf("%d join lines; want the overrun named once", n)
	}
	done := p.logMatches(writeDone("audit-row"))
	if len(done) != 2 {
		t.Errorf("%d \"demo: write done\" lines for audit-row; want 2", len(done))
	}
	for _, i := range done {
		if i > joinAt {
			t.Errorf("an audit-row write finished after the join's verdict (line %d > %d): it was not joined", i, joinAt)
		}
	}
	if i := p.logIndex(writeDone("invite-email")); i >= 0 {
		t.Errorf("the 30s invite-email write finished before the exit; the join should have stopped waiting at 6s")
	}
}

// A write of 2s started during a 200ms window, with the default join: the
// join waits for it out of what the teardown has left instead of cutting it
// at a fixed 500ms, and the process exits 0.
func TestE2EDefaultJoinWaitsForTheWrite(t *testing.T) {
	t.Parallel()
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "200ms", "LAMEDUCK_SHUTDOWN_TEARDOWN", "10s"))
	c := newClient(t, false)
	if r := p.post(c, "/write?name=audit&d=2s"); r.code != http.StatusAccepted {
		t.Fatalf("POST /write = %s; want 202", r)
	}
	sig := p.signal(syscall.SIGTERM)
	code, at := p.waitExit(30 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0 (the write finished inside the teardown):\n%s", code, p.output())
	}
	if d := at.Sub(sig); d > 10200*time.Millisecond+time.Second {
		t.Errorf("exited %s after SIGTERM; want within delay + teardown", d)
	}
	done := p.logIndex(writeDone("audit"))
	joined := p.logIndex(msgContains("join done"))
	if done < 0 || joined < 0 || done > joined {
		t.Fatalf("the write was not joined (write done at line %d, join done at %d):\n%s", done, joined, p.output())
	}
}

// 11. A loop started before the signal stops at the signal; a loop asked
// for after it is refused with 503 and a JSON reason; the process exits 0.
// The late request must arrive inside the window (the listener closes at
// its end): 3s leaves seconds of margin for a loaded machine.
func TestE2ELoopStopsAtSignalAndLateLoopIsRefused(t *testing.T) {
	t.Parallel()
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "3s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	c := newClient(t, false)

	if r := p.post(c, "/loop?name=sweep"); r.code != http.StatusAccepted || r.body["loop"] != "sweep" {
		t.Fatalf("POST /loop?name=sweep before the signal = %s; want 202 {\"loop\":\"sweep\"}", r)
	}

	p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)
	r := p.post(c, "/loop?name=late")
	if r.code != http.StatusServiceUnavailable {
		t.Fatalf("POST /loop?name=late after SIGTERM = %s; want 503", r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("the refusal's Content-Type is %q; want application/json", ct)
	}
	msg, _ := r.body["error"].(string)
	if !strings.Contains(msg, "shutting down") {
		t.Errorf("the refusal %s does not name the reason (want an \"error\" saying the pod is shutting down)", r)
	}
	if reason, _ := r.body["reason"].(string); reason == "" {
		t.Errorf("the refusal %s carries no \"reason\"", r)
	}

	code, _ := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	stopped := p.logIndex(func(l logLine) bool { return l.msg() == "demo: loop stopped" && l.rec["task"] == "sweep" })
	if stopped < 0 {
		t.Fatalf("no \"demo: loop stopped\" line for task sweep")
	}
	if i := p.logIndex(func(l logLine) bool { return l.msg() == "demo: loop stopped" && l.rec["task"] == "late" }); i >= 0 {
		t.Errorf("the refused loop \"late\" ran")
	}
	if i := p.logIndex(func(l logLine) bool {
		return strings.Contains(l.msg(), "background loop refused") && l.rec["task"] == "late"
	}); i < 0 {
		t.Errorf("no log line records the refusal of loop \"late\"")
	}
	if i := p.logIndex(msgContains("lameduck: stopped")); i >= 0 && i < stopped {
		t.Errorf("the sweep loop stopped after the Lifecycle said it had stopped")
	}
}
