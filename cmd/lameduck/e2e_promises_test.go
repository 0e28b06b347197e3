package main

// Promises of README.md and docs/probes-and-shutdown.md that only the real
// binary can hold: a real signal during boot, the exit codes, and the
// /prestop hook called twice or before the pod was ever ready.

import (
	"context"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A real SIGTERM during boot: /startupz and /readyz never turn 200, the
// startup task is interrupted, no lame-duck window is waited ("a pod that
// never became ready waits no window"), and the process exits 0.
func TestE2ESIGTERMDuringBootWaitsNoWindow(t *testing.T) {
	t.Parallel()
	p := startProc(t, env("LAMEDUCK_SHUTDOWN_DELAY", "30s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"),
		"--addr", "127.0.0.1:0", "--startup-delay", "1m")
	p.listening()
	if r := p.get("/startupz"); r.code != http.StatusServiceUnavailable || r.status() != "starting" {
		t.Fatalf("GET /startupz during boot = %s; want 503 starting", r)
	}
	p.signal(syscall.SIGTERM)
	// Until the listener closes, the probes say the pod never became ready.
	for !p.hasExited() {
		r, err := p.do(context.Background(), p.client, "/startupz")
		if err != nil {
			break // the listener closed: teardown
		}
		if r.code == http.StatusOK {
			t.Fatalf("GET /startupz after SIGTERM during boot = %s; want it never 200", r)
		}
		time.Sleep(pollEvery)
	}
	// Exit 0: an interrupted boot is not a failure.
	l := exitedWithNoWindow(t, p)
	if _, ok := p.findLog(msgContains("startup task interrupted")); !ok {
		t.Errorf("no log line says the startup task was interrupted")
	}
	if _, ok := p.findLog(msgContains("lameduck: serving")); ok {
		t.Errorf("the process logged serving after a SIGTERM during boot")
	}
	// The 30s window was not waited: the process's own log says so.
	stopped := p.waitLog(`"lameduck: stopped"`, time.Second, msgContains("lameduck: stopped")).at(t)
	if d := stopped.Sub(l.at(t)); d >= 10*time.Second {
		t.Errorf("stopped %s after the draining line; want no window for a pod never ready", d)
	}
}

// The exit codes as documented: 0 after a clean drain (checked by the
// drain tests), 1 when the teardown cut a request (TestE2ETeardownBudgetCutsLongRequest),
// 1 for a bad setting (TestE2EInvalidDurationsFailBeforeListening), and
// 128 + the signal number for a second signal with
// LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true: 143 for SIGTERM, 130 for SIGINT.
func TestE2ESecondSignalExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		want int
	}{
		{"SIGTERM", syscall.SIGTERM, 143},
		{"SIGINT", syscall.SIGINT, 130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "1m", "LAMEDUCK_EXIT_ON_SECOND_SIGNAL", "true"))
			p.signal(tc.sig)
			p.waitDraining(10 * time.Second)
			p.signal(tc.sig)
			code, _ := p.waitExit(20 * time.Second)
			if code != tc.want {
				t.Fatalf("exit code %d after a second %s; want 128 + %d = %d", code, tc.name, int(tc.sig), tc.want)
			}
		})
	}
}

// GET /prestop called twice (a retried hook, or two kubelet attempts):
// one sequence, one window; both calls answer 200 once the window has
// passed, and the kubelet's SIGTERM after them adds no second window.
func TestE2EPreStopTwiceOneWindow(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "2s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s",
		"LAMEDUCK_PRESTOP", "true", "LAMEDUCK_PRESTOP_TOKEN", "hook-token"))
	hdr := map[string]string{"X-Lameduck-Token": "hook-token"}

	var wg sync.WaitGroup
	replies := make([]reply, 2)
	errs := make([]error, 2)
	for i := range replies {
		wg.Go(func() {
			replies[i], errs[i] = p.doHeader(context.Background(), p.client, "/prestop", hdr)
		})
	}
	wg.Wait()
	for i := range replies {
		if errs[i] != nil {
			t.Fatalf("GET /prestop #%d: %v", i+1, errs[i])
		}
		if replies[i].code != http.StatusOK {
			t.Fatalf("GET /prestop #%d = %s; want 200 once the window has passed", i+1, replies[i])
		}
	}
	// The kubelet's SIGTERM after the hook. The teardown may already have
	// ended the process (nothing is in flight), as it may in a pod.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.hasExited() {
		select {
		case <-p.exited:
		case <-time.After(reqTimeout):
			t.Fatalf("SIGTERM after the hook: %v", err)
		}
	}
	code, _ := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	if n := len(p.logMatches(msgContains("lameduck: draining"))); n != 1 {
		t.Errorf("%d draining lines; want one sequence for two hook calls and a signal", n)
	}
	drained := p.waitLog(`"lameduck: draining"`, time.Second, msgContains("lameduck: draining")).at(t)
	torn := p.waitLog(`"lameduck: teardown"`, time.Second, msgContains("lameduck: teardown")).at(t)
	if w := torn.Sub(drained); w < delay-logSkew || w >= 2*delay {
		t.Errorf("the process's log puts %s between draining and teardown; want one %s window", w, delay)
	}
	for i, r := range replies {
		if !r.at.After(drained.Add(delay - logSkew)) {
			t.Errorf("GET /prestop #%d answered at %s, before the window ended", i+1, r.at.Format(time.StampMicro))
		}
	}
}

// GET /prestop on a pod that never became ready: no window to wait, so
// the hook answers 200 at once and the process stops.
func TestE2EPreStopBeforeReady(t *testing.T) {
	t.Parallel()
	p := startProc(t, env("LAMEDUCK_SHUTDOWN_DELAY", "30s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s",
		"LAMEDUCK_PRESTOP", "true", "LAMEDUCK_PRESTOP_TOKEN", "hook-token"),
		"--addr", "127.0.0.1:0", "--startup-delay", "1m")
	p.listening()
	r, err := p.doHeader(context.Background(), p.client, "/prestop", map[string]string{"X-Lameduck-Token": "hook-token"})
	if err != nil {
		t.Fatalf("GET /prestop during boot: %v", err)
	}
	if r.code != http.StatusOK {
		t.Fatalf("GET /prestop during boot = %s; want 200 (no window for a pod never ready)", r)
	}
	exitedWithNoWindow(t, p)
}

// exitedWithNoWindow waits for p to exit, fails t unless it exited 0 and
// its draining line says window=0s (a pod that never became ready has no
// window), and returns that line.
func exitedWithNoWindow(t *testing.T, p *proc) logLine {
	t.Helper()
	if code, _ := p.waitExit(20 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	l := p.waitLog(`"lameduck: draining"`, time.Second, msgContains("lameduck: draining"))
	if w, _ := l.rec["window"].(string); w != "0s" {
		t.Errorf("the draining line says window=%v; want 0s for a pod that never became ready: %s", l.rec["window"], l.raw)
	}
	return l
}
