package lameduck_test

// Promises of docs/probes-and-shutdown.md ("The shutdown sequence",
// "Configuration") held on the fake clock: teardown-hook errors, closers that
// fail, overrun or panic, OnPanic for hooks and loops, /startupz during an
// interrupted boot, and settings read from the environment actually applied.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// "A hook that returns an error is logged and the next one runs": the
// error does not change Run's result.
func TestTeardownHookErrorIsLoggedAndTheNextRuns(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	if err := errors.Join(
		h.lc.AddTeardownHook("dispatcher", func(context.Context) error { note("dispatcher"); return errors.New("queue unreachable") }),
		h.lc.AddTeardownHook("flush", func(context.Context) error { note("flush"); return nil }),
	); err != nil {
		t.Fatal(err)
	}
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; a hook's error is logged, not returned", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{"dispatcher", "flush"}) {
		t.Fatalf("hooks ran %v; want [dispatcher flush]", order)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "teardown hook dispatcher failed") || !strings.Contains(logs, "queue unreachable") {
		t.Fatalf("the hook's error is not named in the log:\n%s", logs)
	}
}

// "Closers run after the join, in reverse order of registration, each with
// an equal share of what is left of T. One that fails or overruns is named
// and the next one runs; the exit code does not change." A panicking one is
// reported to OnPanic as well.
func TestClosersFailOverrunOrPanicAndTheNextRuns(t *testing.T) {
	var panics []string
	var pmu sync.Mutex
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 9 * time.Second,
		OnPanic: func(what string, v any, _ []byte) { pmu.Lock(); panics = append(panics, what); pmu.Unlock() }})
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	stuck := make(chan struct{})
	defer close(stuck)
	cacheStarted := make(chan struct{})
	if err := errors.Join(
		h.lc.AddCloser("tracer", func(context.Context) error { note("tracer"); return nil }),
		h.lc.AddCloser("cache", func(ctx context.Context) error {
			note("cache")
			close(cacheStarted)
			<-stuck // ignores its context
			return nil
		}),
		h.lc.AddCloser("db", func(context.Context) error { note("db"); return errors.New("pool busy") }),
		h.lc.AddCloser("queue", func(context.Context) error { note("queue"); panic("nil channel") }),
	); err != nil {
		t.Fatal(err)
	}
	h.endWindow(time.Second)
	recv(t, cacheStarted, "the cache closer to start")
	// "queue" and "db" returned at once; "cache" has what is left (9s, the
	// fake clock has not moved) divided by the two closers still to run.
	// The earlier closers' timers are stopped asynchronously: wait until
	// the cache closer's is the only one.
	for deadline := time.Now().Add(10 * time.Second); h.clock.Pending() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers pending; want only the cache closer's", h.clock.Pending())
		}
	}
	if n := h.clock.Advance(4500*time.Millisecond - time.Nanosecond); n != 0 {
		t.Fatalf("the cache closer was cut before its share of 4.5s (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; closers that fail or overrun do not change the result", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{"queue", "db", "cache", "tracer"}) {
		t.Fatalf("closers ran %v; want [queue db cache tracer] (reverse order, the next one runs after each failure)", order)
	}
	logs := h.logs.String()
	for _, want := range []string{"closer db: pool busy", "closer cache: context deadline exceeded", "share=4.5s", "panic in closer queue: nil channel"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
	pmu.Lock()
	defer pmu.Unlock()
	if !slices.Equal(panics, []string{"closer queue"}) {
		t.Errorf("OnPanic got %v; want [closer queue]", panics)
	}
}

// OnPanic hears of a panicking teardown hook and a panicking loop, and the
// sequence goes on.
func TestOnPanicForHooksAndLoops(t *testing.T) {
	got := make(chan string, 4)
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second,
		OnPanic: func(what string, v any, _ []byte) { got <- what + ": " + v.(string) }})
	if err := h.lc.AddTeardownHook("dispatcher", func(context.Context) error { panic("hook bug") }); err != nil {
		t.Fatal(err)
	}
	if err := h.lc.GoLoop("sweep", func(ctx context.Context) error { panic("loop bug") }); err != nil {
		t.Fatal(err)
	}
	loop := recv(t, got, "the loop's panic")
	h.endWindow(time.Second)
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; want nil (a hook's panic is its error, logged)", err)
	}
	hook := recv(t, got, "the hook's panic")
	if loop != "loop sweep: loop bug" {
		t.Errorf("OnPanic for the loop got %q; want %q", loop, "loop sweep: loop bug")
	}
	if hook != "teardown hook dispatcher: hook bug" {
		t.Errorf("OnPanic for the hook got %q; want %q", hook, "teardown hook dispatcher: hook bug")
	}
}

// /startupz stays 503 when the sequence starts during boot: the pod never
// became ready, and says so until it exits.
func TestStartupzStays503WhenTheSequenceStartsDuringBoot(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	h.serve(http.NotFoundHandler())
	booting := h.startupUntilCancelled("migrate")
	h.run()
	recv(t, booting, "the startup task to run")
	probeOf(t, h.lc, "/startupz").status(t, 503, "starting")
	h.lc.BeginShutdown("test")
	await(t, h.lc.Events().ShutdownInitiated)
	if p := probeOf(t, h.lc, "/startupz"); p.code != 503 {
		t.Fatalf("/startupz after the sequence started during boot = %d %s; want 503", p.code, p.body)
	}
	probeOf(t, h.lc, "/readyz").status(t, 503, "draining")
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v; an interrupted boot is not a failure", err)
	}
	if h.lc.Events().StartupDone.Fired() {
		t.Fatal("StartupDone fired for an interrupted boot")
	}
}

// Settings read from the environment are applied, not only parsed:
// LAMEDUCK_HOOK_SHARE sets the hooks' deadline, LAMEDUCK_JOIN_BUDGET caps the
// join, LAMEDUCK_CHECK_TIMEOUT is every check's deadline.
func TestSettingsFromTheEnvironmentAreApplied(t *testing.T) {
	t.Run("HOOK_SHARE", func(t *testing.T) {
		h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second,
			LookupEnv: env(map[string]string{"LAMEDUCK_HOOK_SHARE": "0.5"})})
		stuck := make(chan struct{})
		defer close(stuck)
		entered := make(chan struct{})
		h.lc.AddTeardownHook("dispatcher", func(context.Context) error { close(entered); <-stuck; return nil })
		h.endWindow(time.Second)
		recv(t, entered, "the hook to run")
		await(t, h.lc.Events().HTTPDrained)
		h.timers(1)
		if n := h.clock.Advance(15*time.Second - time.Nanosecond); n != 0 || h.lc.Events().HooksDone.Fired() {
			t.Fatalf("the hooks were cut before 0.5 × 30s (%d timer(s) fired)", n)
		}
		h.clock.Advance(time.Nanosecond)
		await(t, h.lc.Events().HooksDone)
		if err := h.wait(); err == nil || !strings.Contains(err.Error(), `"dispatcher"`) {
			t.Fatalf("Run = %v; want the hook's overrun", err)
		}
	})
	t.Run("JOIN_BUDGET", func(t *testing.T) {
		h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second,
			LookupEnv: env(map[string]string{"LAMEDUCK_JOIN_BUDGET": "2s"})})
		stuck := make(chan struct{})
		defer close(stuck)
		if err := h.lc.GoWrite("audit-row", 0, func(context.Context) error { <-stuck; return nil }); err != nil {
			t.Fatal(err)
		}
		h.endWindow(time.Second)
		await(t, h.lc.Events().HTTPDrained)
		h.timers(1) // the join's budget
		if n := h.clock.Advance(2*time.Second - time.Nanosecond); n != 0 || h.lc.Events().Joined.Fired() {
			t.Fatalf("the join ended before LAMEDUCK_JOIN_BUDGET=2s (%d timer(s) fired)", n)
		}
		h.clock.Advance(time.Nanosecond)
		await(t, h.lc.Events().Joined)
		_ = h.wait() // the abandoned write's verdict is the join tests' concern
		h.logged(t, "audit-row", "the join did not name the write it left")
	})
	t.Run("CHECK_TIMEOUT", func(t *testing.T) {
		h := started(t, lameduck.Config{ShutdownDelay: time.Second, CheckDetails: lameduck.CheckDetailsShow,
			LookupEnv: env(map[string]string{"LAMEDUCK_CHECK_TIMEOUT": "50ms"})})
		if err := h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}}); err != nil {
			t.Fatal(err)
		}
		p := probeOf(t, h.lc, "/readyz")
		p.status(t, 503, "failed")
		if !strings.Contains(p.body, "no answer within 50ms") {
			t.Fatalf("/readyz = %s; want the check's deadline to be LAMEDUCK_CHECK_TIMEOUT=50ms", p.body)
		}
		h.endWindow(time.Second)
		h.waitOK(t)
	})
	t.Run("CHECK_MAX_AGE", func(t *testing.T) {
		h := started(t, lameduck.Config{ShutdownDelay: time.Second,
			LookupEnv: env(map[string]string{"LAMEDUCK_CHECK_MAX_AGE": "1h"})})
		var pings atomic.Int32
		if err := h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(ctx context.Context) error {
			pings.Add(1)
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			probeOf(t, h.lc, "/readyz").status(t, 200, "ok")
		}
		if n := pings.Load(); n != 1 {
			t.Fatalf("3 probes pinged %d times; want 1 with LAMEDUCK_CHECK_MAX_AGE=1h", n)
		}
		h.endWindow(time.Second)
		h.waitOK(t)
	})
}
