package main

// End-to-end tests of startup tasks that meet a dependency not up yet, on
// the real `lameduck demo` binary: --startup-dial tries a TCP dial again
// with backoff until the dependency answers, or until the boot's budget
// LAMEDUCK_STARTUP_TIMEOUT is spent.

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
)

// checkRetryLines checks that each failed try is logged once, with its
// error, and returns how many there were.
func checkRetryLines(t *testing.T, p *proc) int {
	t.Helper()
	n := 0
	for _, i := range p.logMatches(msgContains("startup task failed; trying again")) {
		p.mu.Lock()
		l := p.lines[i]
		p.mu.Unlock()
		n++
		if try, _ := l.rec["try"].(float64); int(try) != n {
			t.Errorf("retry line %d says try=%v: %s", n, l.rec["try"], l.raw)
		}
		if e, _ := l.rec["error"].(string); !strings.Contains(e, "connection refused") {
			t.Errorf("retry line %d lacks the dial's error: %s", n, l.raw)
		}
		if w, _ := l.rec["retry_in"].(string); w == "" {
			t.Errorf("retry line %d does not say when the next try comes: %s", n, l.raw)
		}
	}
	return n
}

// A database down at boot: the pod keeps answering /startupz 503 and tries
// again, and becomes ready when the database comes up, instead of failing in
// milliseconds and crash-looping.
func TestE2EStartupRetriesUntilTheDependencyIsUp(t *testing.T) {
	t.Parallel()
	addr, stop := listenTCP(t)
	stop() // the dependency is down; its port stays reserved
	p := startProc(t, nil, "--addr", "127.0.0.1:0", "--startup-dial", addr)
	p.listening()
	p.waitLog("a failed try", startTimeout, msgContains("startup task failed; trying again"))
	p.want("/startupz", 503, "starting")
	p.want("/healthz", 200, "ok")

	ln, err := testsupport.ReusePort().Listen(context.Background(), "tcp4", addr) // the dependency comes up
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p.waitServing(20 * time.Second)
	// /readyz can answer 200 before this test has read the line from the
	// process's output: wait for it rather than look once.
	done := p.waitLog("the \"startup task done\" line", 10*time.Second, msgContains("startup task done"))
	tries, _ := done.rec["tries"].(float64)
	retries := checkRetryLines(t, p)
	if tries < 2 || int(tries) != retries+1 {
		t.Errorf("done after tries=%v with %d retry lines; want one line per failed try", done.rec["tries"], retries)
	}
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(20 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// A dependency that stays down: the tries stop within the boot's budget and
// the process exits 1 with one line naming the task, its tries, the time
// spent and the setting.
func TestE2EStartupBudgetEndsTheRetries(t *testing.T) {
	t.Parallel()
	addr, stop := listenTCP(t)
	stop()
	p := startProc(t, env("LAMEDUCK_STARTUP_TIMEOUT", "3s"), "--addr", "127.0.0.1:0", "--startup-dial", addr)
	code, _ := p.waitExit(30 * time.Second)
	if code == 0 {
		t.Fatal("exit code 0 after a failed boot")
	}
	if i := p.logIndex(msgContains("lameduck: serving")); i >= 0 {
		t.Fatal("the pod became ready")
	}
	final := p.logMatches(func(l logLine) bool { return l.rec["level"] == "ERROR" })
	if len(final) != 1 {
		t.Fatalf("%d error lines; want the final failure once:\n%s", len(final), p.output())
	}
	retries := checkRetryLines(t, p)
	p.mu.Lock()
	msg := p.lines[final[0]].msg()
	p.mu.Unlock()
	for _, want := range []string{fmt.Sprintf(`startup task "dial %s"`, addr), fmt.Sprintf("after %d tries in ", retries+1),
		"LAMEDUCK_STARTUP_TIMEOUT=3s", "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the final failure %q lacks %q", msg, want)
		}
	}
	if retries < 2 {
		t.Errorf("%d retries in a 3s budget", retries)
	}
}
