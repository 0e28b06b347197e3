package lameduck_test

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
)

// started runs a Lifecycle with one server on a fake clock until it serves.
func started(t *testing.T, cfg lameduck.Config) *harness {
	t.Helper()
	h := newHarness(t, cfg)
	h.serve(http.NotFoundHandler())
	h.start(t)
	return h
}

// endWindow starts the sequence and advances the clock through the window.
func (h *harness) endWindow(window time.Duration) {
	h.t.Helper()
	h.lc.BeginShutdown("test")
	h.timers(1)
	h.clock.Advance(window)
	await(h.t, h.lc.Events().WindowEnded)
}

func TestWriteDuringTheWindowIsJoined(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	h.lc.BeginShutdown("test")
	release := make(chan struct{})
	var wrote atomic.Bool
	if err := h.lc.GoWrite("audit-row", 0, func(ctx context.Context) error {
		<-release
		wrote.Store(true)
		return nil
	}); err != nil {
		t.Fatalf("a write during the window was refused: %v", err)
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	await(t, h.lc.Events().HTTPDrained)
	h.timers(1) // the join is waiting, under its budget
	if h.lc.Events().Joined.Fired() {
		t.Fatal("the join ended with a write still running")
	}
	close(release)
	h.waitOK(t)
	if !wrote.Load() {
		t.Fatal("Run returned before the write finished")
	}
	h.logged(t, "join done — every background task finished (1 joined)", "join not logged")
}

func TestJoinBudgetNamesEachOverrunOnce(t *testing.T) {
	var abandoned atomic.Int64 // what Config.OnTransition hears
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second, JoinBudget: 500 * time.Millisecond,
		OnTransition: func(tr lameduck.Transition) {
			if tr.Kind == lameduck.TransitionAbandoned {
				abandoned.Add(int64(tr.Count))
			}
		}})
	release := make(chan struct{})
	defer close(release)
	h.lc.BeginShutdown("test")
	for range 3 {
		h.lc.GoWrite("audit-row", 0, func(context.Context) error { <-release; return nil })
	}
	h.lc.GoWrite("invite-email", 0, func(context.Context) error { <-release; return nil })
	h.lc.GoWrite("last-used-at", 0, func(context.Context) error { return nil })
	h.timers(1)
	h.clock.Advance(time.Second)
	await(t, h.lc.Events().HTTPDrained)
	h.timers(1) // the join's budget
	// last-used-at returns at once, but on a loaded machine its goroutine
	// may not have run yet: wait for it to end, so that it is joined, not
	// abandoned, whatever the scheduler did.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, ended := lameduck.BackgroundCount(h.lc); ended >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("last-used-at, which returns at once, had not ended after 10s")
		}
	}
	if n := h.clock.Advance(500*time.Millisecond - time.Nanosecond); n != 0 || h.lc.Events().Joined.Fired() {
		t.Fatalf("the join ended before its budget (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	// Work abandoned at exit is a failure the exit code must tell.
	if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "audit-row ×3, invite-email ×1") {
		t.Fatalf("Run = %v; want an error naming the abandoned tasks", err)
	}
	if n := abandoned.Load(); n != 4 {
		t.Errorf("OnTransition heard %d abandoned task(s), want 4", n)
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "join: 500ms spent; still running: audit-row ×3, invite-email ×1"); n != 1 {
		t.Fatalf("want one warning naming each task once with its count, got %d:\n%s", n, logs)
	}
	if !strings.Contains(logs, "after the cap LAMEDUCK_JOIN_BUDGET; raise or unset LAMEDUCK_JOIN_BUDGET") || !strings.Contains(logs, "setting=LAMEDUCK_JOIN_BUDGET") {
		t.Fatalf("the warning does not name the setting that widens the join:\n%s", logs)
	}
	if d := sequenceLength(t, h.lc); d > 11*time.Second {
		t.Fatalf("the sequence took %s, more than delay + teardown", d)
	}
}

func TestWriteAskedForByAJoinedTaskIsJoined(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	release := make(chan struct{})
	var last atomic.Bool
	h.lc.GoLoop("sweep", func(ctx context.Context) error {
		<-ctx.Done()
		<-release
		// The sweep's final audit row, asked for on its way out.
		return h.lc.GoWrite("final-audit-row", 0, func(context.Context) error {
			last.Store(true)
			return nil
		})
	})
	h.endWindow(time.Second)
	await(t, h.lc.Events().HTTPDrained)
	close(release)
	h.waitOK(t)
	if !last.Load() {
		t.Fatalf("the last write was not joined:\n%s", h.logs)
	}
}

func TestLoopsAreCancelledAtTheSignalAndRefusedAfter(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	cancelled := make(chan struct{})
	h.lc.GoLoop("lease", func(ctx context.Context) error {
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	})
	h.lc.BeginShutdown("test")
	recv(t, cancelled, "the loop's cancellation") // at the signal, before the window has passed
	err := h.lc.GoLoop("late-sweep", func(context.Context) error { t.Error("a refused loop ran"); return nil })
	if !errors.Is(err, lameduck.ErrShuttingDown) {
		t.Fatalf("GoLoop after the signal = %v, want ErrShuttingDown", err)
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
	if strings.Contains(h.logs.String(), "background loop failed") {
		t.Fatalf("a loop ending with its cancelled context was logged as a failure:\n%s", h.logs)
	}
}

func TestWorkAfterTheJoinIsRefusedAndLogged(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second})
	h.endWindow(time.Second)
	h.waitOK(t)
	if err := h.lc.GoWrite("too-late", 0, func(context.Context) error { t.Error("ran"); return nil }); !errors.Is(err, lameduck.ErrShuttingDown) {
		t.Fatalf("GoWrite after the join = %v, want ErrShuttingDown", err)
	}
	if err := h.lc.GoLoop("too-late-loop", func(context.Context) error { t.Error("ran"); return nil }); !errors.Is(err, lameduck.ErrShuttingDown) {
		t.Fatalf("GoLoop after the join = %v, want ErrShuttingDown", err)
	}
	h.logged(t, `refused: lameduck: the background join is over: no new work" task=too-late`, "refusal not logged")
}

// store is a stand-in for a database pool: writing to it once closed is the
// bug the join exists to prevent.
type store struct {
	mu     sync.Mutex
	closed bool
	rows   int
}

func (s *store) insert() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("write to a closed store")
	}
	s.rows++
	return nil
}

func TestClosersRunAfterTheJoinInReverseOrder(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	db := &store{}
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	h.lc.AddCloser("tracer", func(context.Context) error { note("tracer"); return nil })
	h.lc.AddCloser("db", func(context.Context) error {
		if !h.lc.Events().Joined.Fired() {
			t.Error("a closer ran before the join")
		}
		db.mu.Lock()
		db.closed = true
		db.mu.Unlock()
		note("db")
		return nil
	})
	release := make(chan struct{})
	h.lc.BeginShutdown("test")
	var writeErr atomic.Value
	h.lc.GoWrite("audit-row", 0, func(context.Context) error {
		<-release
		if err := db.insert(); err != nil {
			writeErr.Store(err)
		}
		return nil
	})
	h.timers(1)
	h.clock.Advance(time.Second)
	await(t, h.lc.Events().HTTPDrained)
	close(release)
	h.waitOK(t)
	if err, _ := writeErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []string{"db", "tracer"}) || db.rows != 1 {
		t.Fatalf("closers ran %v, rows %d; want [db tracer] after one row", order, db.rows)
	}
}

func TestTeardownHooksRunInOrderWithinTheirShare(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second, JoinBudget: time.Second})
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	h.lc.AddTeardownHook("dispatcher", func(ctx context.Context) error { note("dispatcher"); return nil })
	entered := make(chan struct{})
	stuck := make(chan struct{})
	defer close(stuck)
	h.lc.AddTeardownHook("run-console", func(ctx context.Context) error {
		note("run-console")
		close(entered)
		<-stuck // ignores its context
		return nil
	})
	h.lc.AddTeardownHook("never", func(ctx context.Context) error { note("never"); return nil })
	h.endWindow(time.Second)
	recv(t, entered, "entered")
	await(t, h.lc.Events().HTTPDrained) // the hooks run beside the HTTP drain
	h.timers(1)                         // the hooks' deadline: ⅔ of 30s after the window
	if n := h.clock.Advance(20*time.Second - time.Nanosecond); n != 0 || h.lc.Events().HooksDone.Fired() {
		t.Fatalf("hooks cut before ⅔ of the budget (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	await(t, h.lc.Events().HooksDone)
	err := h.wait()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"run-console"`) {
		t.Fatalf("Run = %v, want an overrun naming the hook", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{"dispatcher", "run-console"}) {
		t.Fatalf("hooks ran %v", order)
	}
	h.logged(t, `teardown hook \"run-console\" overran the hooks' share 20s of the teardown budget" hook=run-console not_run=never`, "overrun not named")
}

func TestBackgroundPanicsAreRecoveredAndReported(t *testing.T) {
	var got atomic.Value
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, OnPanic: func(what string, v any, stack []byte) {
		if len(stack) == 0 {
			t.Error("no stack")
		}
		got.Store(what + ": " + v.(string))
	}})
	joined := make(chan struct{})
	h.lc.GoWrite("audit-row", 0, func(context.Context) error {
		defer close(joined)
		panic("nil map")
	})
	recv(t, joined, "joined")
	h.endWindow(time.Second)
	h.waitOK(t)
	if s, _ := got.Load().(string); s != "write audit-row: nil map" {
		t.Fatalf("OnPanic got %q", s)
	}
	h.logged(t, "panic in write audit-row: nil map", "panic not logged")
}

func TestWriteHasItsOwnDeadline(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second, JoinBudget: 5 * time.Second})
	deadline := make(chan error, 1)
	h.lc.GoWrite("invite-email", 2*time.Second, func(ctx context.Context) error {
		<-ctx.Done()
		deadline <- context.Cause(ctx)
		return ctx.Err()
	})
	h.timers(1)
	h.clock.Advance(2 * time.Second)
	if err := recv(t, deadline, "the write's deadline"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the write's context ended with %v", err)
	}
	h.endWindow(time.Second)
	h.waitOK(t)
	h.logged(t, "background write failed", "the write's error was not logged")
}

func TestBadTasksAreRefused(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	for _, err := range []error{
		h.lc.GoWrite("", 0, func(context.Context) error { return nil }),
		h.lc.GoWrite("x", -time.Second, func(context.Context) error { return nil }),
		h.lc.GoWrite("x", 0, nil),
		h.lc.GoLoop("", func(context.Context) error { return nil }),
		h.lc.AddTeardownHook("", nil),
		h.lc.AddCloser("db", nil),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "lameduck: ") {
			t.Errorf("want a lameduck: error, got %v", err)
		}
	}
}

// Once the shutdown sequence has started, what it would run is refused with
// ErrShuttingDown (it has read its steps already), not ErrAlreadyRunning,
// which stays for a second Run and for what only Run's start closes.
func TestRegistrationsAfterTheSignalSayShuttingDown(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	noop := func(context.Context) error { return nil }
	if err := h.lc.AddCloser("before", noop); err != nil {
		t.Fatalf("AddCloser before the signal = %v", err)
	}
	h.lc.BeginShutdown("test")
	for name, err := range map[string]error{
		"AddTeardownHook": h.lc.AddTeardownHook("late", noop),
		"AddCloser":       h.lc.AddCloser("late", noop),
		"GoLoop":          h.lc.GoLoop("late", noop),
	} {
		if !errors.Is(err, lameduck.ErrShuttingDown) || errors.Is(err, lameduck.ErrAlreadyRunning) {
			t.Errorf("%s after the signal = %v; want ErrShuttingDown", name, err)
		}
	}
	h.run()
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := h.lc.Run(context.Background()); !errors.Is(err, lameduck.ErrAlreadyRunning) {
		t.Errorf("a second Run = %v; want ErrAlreadyRunning", err)
	}
	if err := h.lc.AddServer(&http.Server{}, nil); !errors.Is(err, lameduck.ErrAlreadyRunning) {
		t.Errorf("AddServer after Run = %v; want ErrAlreadyRunning", err)
	}
}

// A service that never started background work before the signal keeps no
// tail for the join, yet a write started by a request answered during the
// drain is still joined from the time the drain left.
func TestWriteStartedDuringTheDrainIsJoined(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second, JoinBudget: 2 * time.Second})
	entered, answer := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	var wrote atomic.Bool
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-answer
		h.lc.GoWrite("audit-row", 0, func(context.Context) error { <-release; wrote.Store(true); return nil })
	}))
	h.start(t)
	c := client(t)
	posted := sendAsync(c, "POST", base+"/orders")
	defer func() { recv(t, posted, "the request's end") }()
	recv(t, entered, "entered")
	h.endWindow(time.Second)
	close(answer) // the mutation is answered during the drain, and asks for its audit row
	await(t, h.lc.Events().HTTPDrained)
	h.timers(1) // the join, with its whole budget
	close(release)
	h.waitOK(t)
	if !wrote.Load() || !strings.Contains(h.logs.String(), "(1 joined)") {
		t.Fatalf("the write was not joined:\n%s", h.logs)
	}
}

// By default the join has no budget of its own: a write still running after
// the HTTP drain is waited for with whatever the teardown has left, not cut
// at a fixed 500ms while most of the teardown goes unused.
func TestJoinUsesWhatTheTeardownLeaves(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	release := make(chan struct{})
	var wrote atomic.Bool
	h.lc.GoWrite("audit", 0, func(context.Context) error { <-release; wrote.Store(true); return nil })
	h.endWindow(time.Second)
	await(t, h.lc.Events().HTTPDrained)
	h.timers(1) // the join's bound, the only timer
	if n := h.clock.Advance(2 * time.Second); n != 0 || h.lc.Events().Joined.Fired() {
		t.Fatalf("the join gave up after 2s of a 10s teardown (%d timer(s) fired)", n)
	}
	if n := h.clock.Advance(7 * time.Second); n != 0 || h.lc.Events().Joined.Fired() {
		t.Fatalf("the join gave up before the teardown's end (%d timer(s) fired)", n)
	}
	close(release)
	h.waitOK(t)
	if !wrote.Load() {
		t.Fatal("the write was cut")
	}
	if d := sequenceLength(t, h.lc); d > 11*time.Second {
		t.Fatalf("the sequence took %s, more than delay + teardown", d)
	}
}

// Work still running at the end of the teardown is abandoned: the warning
// names it, the bound and the setting that widens it, and Run fails.
func TestJoinAbandonedAtTheTeardownsEnd(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	release := make(chan struct{})
	defer close(release)
	h.lc.GoWrite("audit", 0, func(context.Context) error { <-release; return nil })
	h.endWindow(time.Second)
	await(t, h.lc.Events().HTTPDrained)
	h.timers(1)
	h.clock.Advance(10 * time.Second)
	err := h.wait()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "audit ×1") {
		t.Fatalf("Run = %v; want an error naming the abandoned write", err)
	}
	logs := h.logs.String()
	for _, want := range []string{"join: 10s spent; still running: audit ×1", "what the teardown budget left",
		"raise LAMEDUCK_SHUTDOWN_TEARDOWN (and terminationGracePeriodSeconds with it)", "setting=LAMEDUCK_SHUTDOWN_TEARDOWN"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the warning lacks %q:\n%s", want, logs)
		}
	}
	if d := sequenceLength(t, h.lc); d != 11*time.Second {
		t.Fatalf("the sequence took %s, want delay + teardown = 11s", d)
	}
}

// A loop asked for by whoever already sees the pod draining is refused:
// loops are refused before readiness flips, so no observer of the draining
// phase (a probe's 503, the ShutdownInitiated event) can start one. (Seen
// once in ~30 runs of the e2e suite: a POST /loop sent after /readyz said
// 503 was accepted, then stopped at once.)
func TestLoopRefusedOnceDrainingIsVisible(t *testing.T) {
	var lcRef atomic.Pointer[lameduck.Lifecycle]
	errs := make(chan error, 1)
	h := newHarness(t, lameduck.Config{OnTransition: func(tr lameduck.Transition) {
		if lc := lcRef.Load(); lc != nil && tr.Kind == lameduck.TransitionEvent && tr.Event == lc.Events().ShutdownInitiated {
			errs <- lc.GoLoop("late", func(ctx context.Context) error { <-ctx.Done(); return nil })
		}
	}})
	lcRef.Store(h.lc)
	h.lc.BeginShutdown("test")
	if err := recv(t, errs, "the ShutdownInitiated transition"); !errors.Is(err, lameduck.ErrShuttingDown) {
		t.Fatalf("GoLoop when ShutdownInitiated fired = %v; want ErrShuttingDown", err)
	}
}
