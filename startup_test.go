package lameduck_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// flaky returns a startup task that fails its first n tries, and a channel
// that receives the number of each try as it starts.
func flaky(n int) (func(context.Context) error, <-chan int) {
	tries := make(chan int, 100)
	try := 0
	return func(ctx context.Context) error {
		try++
		tries <- try
		if try <= n {
			return fmt.Errorf("dial tcp 127.0.0.1:5432: connection refused (try %d)", try)
		}
		return nil
	}, tries
}

// next returns the number of the next try of a flaky task.
func next(t *testing.T, tries <-chan int) int {
	t.Helper()
	return testsupport.Recv(t, tries, "the task to be tried again")
}

// waitRetryOrStop waits until the boot waits on n timers (a retry is
// pending) and reports true, or until Run has stopped and reports false.
func (h *harness) waitRetryOrStop(n int) bool {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-h.lc.Events().Stopped.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.clock.WaitForTimers(ctx, n)
	if h.lc.Events().Stopped.Fired() {
		return false
	}
	if err != nil {
		h.t.Fatalf("neither a retry nor the end: %v", err)
	}
	return true
}

// A database down at boot: the task is tried again after an exponential,
// jittered wait — never earlier than half of it — each failure logged once
// with its error, and the boot finishes when the database comes up.
func TestStartupTaskRetriesWithBackoff(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	fn, tries := flaky(3)
	if err := h.lc.AddStartupTask("migrate", fn, lameduck.Retry{First: time.Second, Max: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	h.serve(nil)
	h.run()
	next(t, tries)
	for try, b := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} { // capped at Max
		h.timers(1) // the backoff's, the only timer (no startup budget)
		if n := h.clock.Advance(b/2 - time.Nanosecond); n != 0 {
			t.Fatalf("the retry's timer fired before half of the %s backoff", b)
		}
		h.clock.Advance(b/2 + time.Nanosecond)
		if n := next(t, tries); n != try+2 {
			t.Fatalf("try %d, want %d", n, try+2)
		}
	}
	await(t, h.lc.Events().StartupDone)
	logs := h.logs.String()
	for i := 1; i <= 3; i++ {
		if n := strings.Count(logs, fmt.Sprintf("connection refused (try %d)", i)); n != 1 {
			t.Errorf("try %d's error logged %d times, want once:\n%s", i, n, logs)
		}
	}
	if n := strings.Count(logs, "startup task failed; trying again"); n != 3 {
		t.Errorf("%d retry lines, want 3", n)
	}
	if !strings.Contains(logs, "startup task done\" task=migrate tries=4") {
		t.Errorf("the success does not count the tries:\n%s", logs)
	}
	h.lc.BeginShutdown("test")
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

// The startup budget ends the retrying: the final failure names the task,
// its tries, the time spent and the setting, and Run fails.
func TestStartupBudgetEndsTheRetries(t *testing.T) {
	h := newHarness(t, lameduck.Config{StartupTimeout: 10 * time.Second})
	fn, tries := flaky(1000)
	h.lc.AddStartupTask("migrate", fn, lameduck.Retry{First: 2 * time.Second, Max: 2 * time.Second})
	h.serve(nil)
	h.run()
	count := next(t, tries)
	for h.waitRetryOrStop(2) { // the budget's timer and the backoff's
		// The jittered backoff and the budget may end in the same
		// advance: then the budget wins and no try follows.
		h.clock.Advance(2 * time.Second)
		select {
		case count = <-tries:
		case <-h.lc.Events().Stopped.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("neither another try nor the end of the boot")
		}
	}
	err := h.wait()
	for drained := false; !drained; { // a try that raced the end above
		select {
		case count = <-tries:
		default:
			drained = true
		}
	}
	if !errors.Is(err, lameduck.ErrStartupFailed) {
		t.Fatalf("Run = %v, want ErrStartupFailed", err)
	}
	msg := err.Error()
	for _, want := range []string{`startup task "migrate"`, fmt.Sprintf("after %d tries in ", count),
		"LAMEDUCK_STARTUP_TIMEOUT=10s", "failureThreshold × periodSeconds", fmt.Sprintf("connection refused (try %d)", count)} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure %q lacks %q", msg, want)
		}
	}
	if count < 5 || count > 10 {
		t.Errorf("%d tries in a 10s budget with waits of 1-2s", count)
	}
	if n := strings.Count(h.logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines; want the final failure once:\n%s", n, h.logs)
	}
}

// A task that ignores no context but blocks on its dependency is cut at the
// budget, which is named.
func TestStartupBudgetCancelsARunningTry(t *testing.T) {
	h := newHarness(t, lameduck.Config{StartupTimeout: 5 * time.Second})
	tried := make(chan struct{}, 1)
	h.lc.AddStartupTask("warm-cache", func(ctx context.Context) error { tried <- struct{}{}; <-ctx.Done(); return ctx.Err() })
	h.serve(nil)
	h.run()
	// The budget's timer is pending before the task's try begins (and the
	// try's "in 5s" is counted from that beginning): advancing between the
	// two would make it "in 0s" (1 in ~25 suite runs under -race).
	recv(t, tried, "the task's first try")
	h.timers(1)
	h.clock.Advance(5 * time.Second)
	err := h.wait()
	if !errors.Is(err, lameduck.ErrStartupFailed) || !strings.Contains(err.Error(), "after 1 try in 5s; the startup budget LAMEDUCK_STARTUP_TIMEOUT=5s is spent") {
		t.Fatalf("Run = %v", err)
	}
}

// A task that ignores its context does not hold the boot past its budget:
// at STARTUP_TIMEOUT the boot fails, naming the task and the setting, the
// pod never serves, and Run returns, saying at exit that the task is still
// running. Before, the task was called synchronously: the boot stayed
// "starting" with nothing logged, and Run waited for the task for good.
func TestStartupBudgetDoesNotWaitForATaskIgnoringItsContext(t *testing.T) {
	h := newHarness(t, lameduck.Config{StartupTimeout: 5 * time.Second})
	tried, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	h.lc.AddStartupTask("migrate", func(context.Context) error { tried <- struct{}{}; <-release; return nil })
	h.serve(nil)
	h.run()
	recv(t, tried, "the task's first try")
	h.timers(1) // the budget's
	h.clock.Advance(5 * time.Second)
	h.timers(1) // the task's grace to return
	h.clock.Advance(lameduck.StartupReturnGrace)
	err := h.wait()
	if !errors.Is(err, lameduck.ErrStartupFailed) {
		t.Fatalf("Run = %v, want ErrStartupFailed", err)
	}
	for _, want := range []string{`startup task "migrate"`, "after 1 try in 5.1s; the startup budget LAMEDUCK_STARTUP_TIMEOUT=5s is spent",
		"still running 100ms after its context ended"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the failure %q lacks %q", err, want)
		}
	}
	if h.lc.Events().StartupDone.Fired() {
		t.Error("the pod served although its boot failed")
	}
	if n := strings.Count(h.logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines; want the failure once:\n%s", n, h.logs)
	}
	if !strings.Contains(h.logs.String(), "startup task migrate is still running at exit") {
		t.Errorf("no line says the task still runs at exit:\n%s", h.logs)
	}
}

func TestStartupRetryTriesCap(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	fn, tries := flaky(1000)
	h.lc.AddStartupTask("migrate", fn, lameduck.Retry{First: time.Second, Tries: 3})
	h.serve(nil)
	h.run()
	next(t, tries)
	for range 2 {
		h.timers(1)
		h.clock.Advance(10 * time.Second)
		next(t, tries)
	}
	err := h.wait()
	if !errors.Is(err, lameduck.ErrStartupFailed) || !strings.Contains(err.Error(), "after 3 tries in ") || !strings.Contains(err.Error(), "Retry.Tries=3 reached") {
		t.Fatalf("Run = %v", err)
	}
}

// SIGTERM during a backoff ends the boot at once, as an interruption.
func TestShutdownDuringARetryWait(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	fn, tries := flaky(1000)
	h.lc.AddStartupTask("migrate", fn, lameduck.Retry{})
	h.serve(nil)
	h.run()
	next(t, tries)
	h.timers(1)
	h.lc.BeginShutdown("test")
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; an interrupted boot is no failure", err)
	}
	if !strings.Contains(h.logs.String(), "startup task interrupted by shutdown\" task=migrate tries=1") {
		t.Fatalf("logs:\n%s", h.logs)
	}
}

func TestBadRetriesAreRefused(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	ok := func(context.Context) error { return nil }
	for _, err := range []error{
		h.lc.AddStartupTask("a", ok, lameduck.Retry{First: -time.Second}),
		h.lc.AddStartupTask("b", ok, lameduck.Retry{Tries: -1}),
		h.lc.AddStartupTask("c", ok, lameduck.Retry{}, lameduck.Retry{}),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "lameduck: AddStartupTask(") {
			t.Errorf("want a refusal, got %v", err)
		}
	}
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
	booting := h.startupUntilCancelled("warm-up")
	h.serve(okHandler)
	h.run()
	recv(t, booting, "the startup task to run")
	if got := h.lc.Phase(); got != lameduck.PhaseStarting {
		t.Fatalf("phase during boot = %s", got)
	}
	// Outside serving /readyz does not even look at the path.
	probeOf(t, h.lc, "/readyz/nope").status(t, 503, "starting")
	h.lc.BeginShutdown("test")
	h.waitOK(t)
	if h.lc.Events().StartupDone.Fired() {
		t.Fatal("the pod passed through serving")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(phases, " → "); got != "draining → stopping → stopped" {
		t.Fatalf("phases after starting: %s; want draining → stopping → stopped", got)
	}
}
