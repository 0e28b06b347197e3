package health_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
)

// Checks are pinged concurrently, each under its own deadline, so the
// probe answers in max(ping) rather than sum(ping).
func TestRunAnswersInMaxNotSum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		for i, d := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond} {
			mustAdd(t, c, health.Check{Name: fmt.Sprintf("c%d", i), Func: sleepy(d, nil), Critical: true})
		}
		start := time.Now()
		rep := mustRun(t, c, t.Context())
		if got := time.Since(start); got != 300*time.Millisecond {
			t.Fatalf("probe took %v, want 300ms (the slowest check), not 600ms (the sum)", got)
		}
		if rep.Status != health.StatusOK || len(rep.Checks) != 3 {
			t.Fatalf("report %+v", rep)
		}
	})
}

func TestOutcomesAndStatus(t *testing.T) {
	boom := errors.New("connection refused")
	for _, tc := range []struct {
		name     string
		fn       func(context.Context) error
		critical bool
		text     string
		status   health.Status
		took     time.Duration
	}{
		{"ok", sleepy(10*time.Millisecond, nil), true, "ok", health.StatusOK, 10 * time.Millisecond},
		{"error-critical", sleepy(10*time.Millisecond, boom), true, "error: connection refused", health.StatusFailed, 10 * time.Millisecond},
		{"error-degraded", sleepy(10*time.Millisecond, boom), false, "error: connection refused", health.StatusDegraded, 10 * time.Millisecond},
		{"honours-ctx-timeout", sleepy(time.Hour, nil), true, "timeout: no answer within 1s", health.StatusFailed, time.Second},
		{"panic", func(context.Context) error { panic("kaboom") }, false, "panic: kaboom", health.StatusDegraded, 0},
		{"panic-error", func(context.Context) error { panic(boom) }, true, "panic: connection refused", health.StatusFailed, 0},
		{"error-multiline", sleepy(0, errors.New("line one\nline two")), true, "error: line one line two", health.StatusFailed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
				mustAdd(t, c, health.Check{Name: "dep", Func: tc.fn, Critical: tc.critical})
				start := time.Now()
				rep := mustRun(t, c, t.Context())
				if got := rep.Checks["dep"]; got != tc.text {
					t.Errorf("checks.dep = %q, want %q", got, tc.text)
				}
				if rep.Status != tc.status {
					t.Errorf("status %q, want %q", rep.Status, tc.status)
				}
				if got := time.Since(start); got != tc.took {
					t.Errorf("took %v, want %v", got, tc.took)
				}
				if len(rep.Results) != 1 || rep.Results[0].Text != tc.text || rep.Results[0].Critical != tc.critical {
					t.Errorf("results %+v", rep.Results)
				}
			})
		})
	}
}

func TestNoChecksIsThePhaseAnswer(t *testing.T) {
	for _, c := range []*health.Checker{health.NewChecker(health.CheckerOptions{}), new(health.Checker)} {
		rep, err := c.Run(t.Context(), "", nil)
		if err != nil || rep.Status != health.StatusOK || rep.Checks != nil || rep.Results != nil {
			t.Fatalf("Run on an empty Checker = %+v, %v; want StatusOK with nil Checks", rep, err)
		}
		if _, err := c.Run(t.Context(), "db", nil); !errors.Is(err, health.ErrUnknownCheck) {
			t.Fatalf("only=db on an empty Checker: %v", err)
		}
	}
}

// A panicking ping is reported "panic: <value>", counts as a
// failure, goes to the error tracker, and the process lives.
func TestPanicRecoveredAndHandedToHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type got struct {
			name  string
			value any
			stack string
		}
		var mu sync.Mutex
		var hooked []got
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{Logger: logs.logger(), OnPanic: func(name string, v any, stack []byte) {
			mu.Lock()
			defer mu.Unlock()
			hooked = append(hooked, got{name, v, string(stack)})
		}})
		mustAdd(t, c, health.Check{Name: "driver", Critical: true, Func: func(context.Context) error { panicInDriver(); return nil }})
		mustAdd(t, c, health.Check{Name: "nil", Func: func(context.Context) error { panic(nil) }})
		mustAdd(t, c, health.Check{Name: "goexit", Func: func(context.Context) error { runtime.Goexit(); return nil }})
		for range 3 {
			rep := mustRun(t, c, t.Context())
			if rep.Status != health.StatusFailed {
				t.Fatalf("status %q, want failed", rep.Status)
			}
			if got := rep.Checks["driver"]; got != "panic: malformed response" {
				t.Fatalf("driver: %q", got)
			}
			if got := rep.Checks["nil"]; !strings.HasPrefix(got, "panic: panic called with nil argument") {
				t.Fatalf("nil: %q", got)
			}
			if got := rep.Checks["goexit"]; got != "panic: runtime.Goexit called by the check" {
				t.Fatalf("goexit: %q", got)
			}
			// The hooks run after the verdicts are out. A panic that finds
			// its check's hook still running from the probe before is handed
			// over, and of several such only the latest (reportPanic): let
			// this probe's hooks end before the next probe.
			synctest.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		if len(hooked) != 9 {
			t.Fatalf("OnPanic called %d times, want 9 (once per panic)", len(hooked))
		}
		for _, h := range hooked {
			if h.name == "driver" && (h.value != "malformed response" || !strings.Contains(h.stack, "panicInDriver")) {
				t.Fatalf("hook got %q %v, stack without the panicking frame:\n%s", h.name, h.value, h.stack)
			}
		}
		if n := logs.count("panicked", "check=driver"); n != 1 {
			t.Fatalf("%d panic lines for driver, want 1 (a transition is said once):\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), "panicInDriver") {
			t.Fatalf("the stack is not in the log:\n%s", logs.String())
		}
	})
}

func panicInDriver() { panic("malformed response") }

func TestOnPanicThatPanicsIsSurvived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{Logger: logs.logger(), OnPanic: func(string, any, []byte) { panic("tracker down") }})
		mustAdd(t, c, health.Check{Name: "p", Func: func(context.Context) error { panic("x") }})
		if rep := mustRun(t, c, t.Context()); rep.Checks["p"] != "panic: x" {
			t.Fatalf("%+v", rep)
		}
		synctest.Wait()
		if logs.count("OnPanic panicked", "tracker down") != 1 {
			t.Fatalf("log:\n%s", logs.String())
		}
	})
}

// A ping that never returns is a timeout at its deadline; the
// next probes say stalled and do not launch it again; once it returns, the
// next probe pings afresh.
func TestWedgedCheckTimeoutThenStalledThenFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{Logger: logs.logger()})
		release := make(chan struct{})
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "mongo", Critical: true, Func: wedge(release, &calls)})
		mustAdd(t, c, health.Check{Name: "fine", Func: sleepy(0, nil)})

		start := time.Now()
		rep := mustRun(t, c, t.Context())
		if got := time.Since(start); got != time.Second {
			t.Fatalf("first probe took %v, want the 1s deadline", got)
		}
		if rep.Checks["mongo"] != "timeout: no answer within 1s" || rep.Status != health.StatusFailed || rep.Checks["fine"] != "ok" {
			t.Fatalf("first probe: %+v", rep)
		}
		for range 5 {
			time.Sleep(5 * time.Second)
			start := time.Now()
			rep := mustRun(t, c, t.Context())
			if got := time.Since(start); got != 0 {
				t.Fatalf("a stalled probe took %v, want an immediate answer", got)
			}
			if rep.Checks["mongo"] != "stalled: an earlier probe's ping has not returned" || rep.Status != health.StatusFailed {
				t.Fatalf("later probe: %+v", rep)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("wedged check launched %d times while captive, want 1", n)
		}
		if got := c.Captive(); len(got) != 1 || got[0] != "mongo" {
			t.Fatalf("Captive() = %v, want [mongo]", got)
		}
		close(release)
		synctest.Wait() // the captive ping returns and frees its slot
		if got := c.Captive(); len(got) != 0 {
			t.Fatalf("Captive() after the return = %v, want none", got)
		}
		rep = mustRun(t, c, t.Context())
		if rep.Checks["mongo"] != "ok" || rep.Status != health.StatusOK {
			t.Fatalf("after the captive returned: %+v", rep)
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("calls %d, want 2 (the next probe pings afresh)", n)
		}
		synctest.Wait() // the ping logs after publishing its verdict
		for _, want := range []string{"timed out", "is stalled", "captive check returned", "is ok again"} {
			if n := logs.count(want, "check=mongo"); n != 1 {
				t.Errorf("%d log lines %q, want 1:\n%s", n, want, logs.String())
			}
		}
	})
}

// Overlapping probes share one ping, and a probe that joins a
// ping in progress is never told stalled.
func TestOverlappingProbesShareOnePing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: counted(&calls, 950*time.Millisecond)})
		var wg sync.WaitGroup
		var a health.Report
		wg.Go(func() { a = mustRun(t, c, t.Context()) })
		time.Sleep(900 * time.Millisecond) // 50ms before the ping's deadline
		start := time.Now()
		b := mustRun(t, c, t.Context())
		wg.Wait()
		if got := time.Since(start); got != 50*time.Millisecond {
			t.Fatalf("joiner waited %v, want the 50ms left of the shared ping", got)
		}
		if a.Checks["db"] != "ok" || b.Checks["db"] != "ok" {
			t.Fatalf("a=%v b=%v, want both ok", a.Checks, b.Checks)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("check ran %d times, want 1", n)
		}
	})
}

// A joiner of a ping that turns out wedged gets the shared verdict,
// "timeout" (never "stalled": the ping was within its deadline when the
// joiner came); a probe that comes after the deadline gets "stalled".
func TestJoinerOfWedgedPingGetsTimeoutNotStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		release := make(chan struct{})
		defer close(release)
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: wedge(release, &calls)})
		var wg sync.WaitGroup
		var a health.Report
		wg.Go(func() { a = mustRun(t, c, t.Context()) })
		time.Sleep(900 * time.Millisecond)
		b := mustRun(t, c, t.Context())
		wg.Wait()
		want := "timeout: no answer within 1s"
		if a.Checks["db"] != want || b.Checks["db"] != want {
			t.Fatalf("a=%q b=%q, want both %q", a.Checks["db"], b.Checks["db"], want)
		}
		time.Sleep(100 * time.Millisecond)
		if got := mustRun(t, c, t.Context()).Checks["db"]; !strings.HasPrefix(got, "stalled") {
			t.Fatalf("after the deadline: %q, want stalled", got)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("calls %d", n)
		}
	})
}

// A probe whose own context ends before the shared ping's verdict reports
// how long it waited; the ping goes on (its context is not the launching
// probe's) and serves the others.
func TestCallerDeadlineAndDetachedPing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		type key struct{}
		var sawValue atomic.Bool
		mustAdd(t, c, health.Check{Name: "db", Func: func(ctx context.Context) error {
			sawValue.Store(ctx.Value(key{}) == "trace-1")
			return sleepy(500*time.Millisecond, nil)(ctx)
		}})
		ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), key{}, "trace-1"), 100*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		var b health.Report
		wg.Go(func() {
			time.Sleep(200 * time.Millisecond)
			b = mustRun(t, c, t.Context())
		})
		a := mustRun(t, c, ctx)
		wg.Wait()
		if a.Checks["db"] != "timeout: no answer within 100ms" || a.Status != health.StatusDegraded {
			t.Fatalf("launcher: %+v", a)
		}
		if b.Checks["db"] != "ok" {
			t.Fatalf("joiner after the launcher left: %+v; the ping must not be canceled with its launcher", b)
		}
		if !sawValue.Load() {
			t.Fatal("the ping's context lost the launching probe's values")
		}
	})
}

// No cached result outlives its probe: every probe pings (or joins a ping
// in progress), so a change in the dependency shows on the next probe.
func TestNoCachedResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		var down atomic.Bool
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
			calls.Add(1)
			if down.Load() {
				return errors.New("down")
			}
			return nil
		}})
		for i := range 6 {
			down.Store(i%2 == 1)
			want := "ok"
			if i%2 == 1 {
				want = "error: down"
			}
			if got := mustRun(t, c, t.Context()).Checks["db"]; got != want {
				t.Fatalf("probe %d: %q, want %q", i, got, want)
			}
		}
		if n := calls.Load(); n != 6 {
			t.Fatalf("calls %d, want 6: one ping per sequential probe", n)
		}
	})
}

// The log says each transition once per check, not once per probe.
func TestTransitionsLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{Logger: logs.logger()})
		var mode atomic.Value
		mode.Store("ok")
		mustAdd(t, c, health.Check{Name: "db", Func: func(context.Context) error {
			switch mode.Load() {
			case "error":
				return fmt.Errorf("refused at %v", time.Now().UnixNano()) // new text each time
			case "panic":
				panic("bad")
			}
			return nil
		}})
		for _, m := range []string{"ok", "ok", "error", "error", "error", "ok", "ok", "panic", "panic", "ok"} {
			mode.Store(m)
			mustRun(t, c, t.Context())
		}
		synctest.Wait()
		for sub, want := range map[string]int{"is failing": 1, "is ok again": 2, "panicked": 1} {
			if n := logs.count(sub, "check=db"); n != want {
				t.Errorf("%d lines %q, want %d", n, sub, want)
			}
		}
		if n := logs.count("check=db"); n != 4 {
			t.Errorf("%d lines about db, want 4 (one per transition):\n%s", n, logs.String())
		}
	})
}

// One atomic observation per ping: a probe that wakes after both the
// ping's result and its deadline are in reads the result, never a timeout.
// Deterministic: the probe is held past the deadline by a hook.
func TestCompletedPingIsNeverATimeout_LateWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(5 * time.Second) // on failure, let the last ping finish inside the bubble
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		health.SetTestHooks(c, func() { time.Sleep(3 * time.Second) }, nil)
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Timeout: time.Second, Func: func(context.Context) error {
			time.Sleep(time.Second - time.Nanosecond)
			return nil
		}})
		for i := range 200 {
			if got := mustRun(t, c, t.Context()).Checks["db"]; got != "ok" {
				t.Fatalf("iteration %d: %q, want ok: the ping answered 1ns before its deadline", i, got)
			}
		}
	})
}

// The same, when the deadline passes between the check's return and the
// publication of its result.
func TestCompletedPingIsNeverATimeout_DeadlineDuringPublication(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(5 * time.Second) // on failure, let the last ping finish inside the bubble
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		health.SetTestHooks(c, nil, func() { time.Sleep(2 * time.Second) })
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Timeout: time.Second, Func: func(context.Context) error {
			time.Sleep(time.Second - time.Nanosecond)
			return nil
		}})
		for i := range 50 {
			rep := mustRun(t, c, t.Context())
			if got := rep.Checks["db"]; got != "ok" || rep.Status != health.StatusOK {
				t.Fatalf("iteration %d: %q (%s), want ok: the check returned before its deadline", i, got, rep.Status)
			}
		}
	})
}

// The boundary in real time, under -race: pings that answer around their
// deadline, shared by three concurrent probes. Every report is one
// consistent observation: the status agrees with the text, and probes that
// shared a ping read the same verdict. That a ping which returned before its
// deadline is never a timeout is held exactly, in synctest bubbles, by the
// TestCompletedPingIsNeverATimeout tests above: in real time a goroutine
// preempted between its return and the publication of its result is a
// genuine timeout, so no margin would make that assertion free of luck.
func TestBoundaryIsOneObservation(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 100
	}
	const timeout = 3 * time.Millisecond
	const wantTimeout = "timeout: no answer within 3ms"
	oks, timeouts := 0, 0
	for i := range iterations {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		var calls atomic.Int32
		target := time.Duration(1+i%5) * time.Millisecond // 1..5ms, around the 3ms deadline
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Timeout: timeout, Func: func(ctx context.Context) error {
			calls.Add(1)
			time.Sleep(target)
			return nil
		}})
		var wg sync.WaitGroup
		reps := make([]health.Report, 3)
		for j := range reps {
			wg.Go(func() { reps[j] = mustRun(t, c, context.Background()) })
		}
		wg.Wait()
		shared := calls.Load() == 1
		for j, rep := range reps {
			text := rep.Checks["db"]
			switch {
			case text == "ok" && rep.Status == health.StatusOK:
			case text == wantTimeout && rep.Status == health.StatusFailed:
				timeouts++
			case strings.HasPrefix(text, "stalled") && rep.Status == health.StatusFailed:
				shared = false
			default:
				t.Fatalf("iteration %d probe %d: torn observation: status %q with %q", i, j, rep.Status, text)
			}
		}
		if shared && (reps[0].Checks["db"] != reps[1].Checks["db"] || reps[1].Checks["db"] != reps[2].Checks["db"]) {
			t.Fatalf("iteration %d: probes sharing one ping read different verdicts: %v %v %v", i, reps[0].Checks, reps[1].Checks, reps[2].Checks)
		}
		for _, rep := range reps {
			if rep.Checks["db"] == "ok" {
				oks++
			}
		}
	}
	// Both sides of the boundary were crossed, or the test proves nothing:
	// 1ms pings beat a 3ms deadline and 5ms pings lose to it.
	if oks == 0 || timeouts == 0 {
		t.Fatalf("%d ok and %d timeout reports; want both sides of the boundary exercised", oks, timeouts)
	}
}

// A slow check that honours its context times out once per probe but is
// never captive: its timeout is logged once, and no "captive check
// returned" line follows each probe (a hostile review found one per probe).
func TestSlowButHonestCheckIsNotCaptive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{Logger: logs.logger(), DefaultTimeout: time.Second})
		mustAdd(t, c, health.Check{Name: "search", Func: func(ctx context.Context) error {
			select {
			case <-time.After(2 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
		for range 5 {
			rep := mustRun(t, c, t.Context())
			if !strings.HasPrefix(rep.Checks["search"], "timeout") {
				t.Fatalf("search: %q", rep.Checks["search"])
			}
			synctest.Wait()
		}
		if n := logs.count("captive check returned"); n != 0 {
			t.Errorf("%d captive lines for a check that honours its context:\n%s", n, logs.String())
		}
		if n := logs.count("check=search"); n != 1 {
			t.Errorf("%d lines about search, want 1 (the timeout):\n%s", n, logs.String())
		}
	})
}

type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg } // panics on a nil *nilErr

// A check that returns a typed nil error (a classic driver-wrapper bug)
// made the error's own Error method panic inside the ping's publication,
// outside any recover: the process died. It is a panic of the check.
func TestTypedNilErrorIsAPanicNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got atomic.Value
		c := health.NewChecker(health.CheckerOptions{Logger: quiet(), OnPanic: func(name string, v any, _ []byte) { got.Store(name) }})
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
			var e *nilErr
			return e
		}})
		rep := mustRun(t, c, t.Context())
		if rep.Status != health.StatusFailed || !strings.HasPrefix(rep.Checks["db"], "panic: ") ||
			!strings.Contains(rep.Checks["db"], "*health_test.nilErr") {
			t.Fatalf("%+v", rep)
		}
		synctest.Wait()
		if got.Load() != "db" {
			t.Fatal("OnPanic not called")
		}
	})
}

// An OnPanic hook that blocks must not keep a goroutine per probe alive.
func TestBlockingOnPanicCostsOneGoroutine(t *testing.T) {
	release := make(chan struct{})
	c := health.NewChecker(health.CheckerOptions{Logger: quiet(), OnPanic: func(string, any, []byte) { <-release }})
	mustAdd(t, c, health.Check{Name: "s3", Func: func(context.Context) error { panic("bad response") }})
	mustRun(t, c, t.Context())
	before := runtime.NumGoroutine()
	for range 200 {
		if rep := mustRun(t, c, t.Context()); !strings.HasPrefix(rep.Checks["s3"], "panic: ") {
			t.Fatalf("%+v", rep)
		}
	}
	// The last pings may still be on their way out: let them leave, for
	// as long as a loaded machine may keep them off the CPU (a passing run
	// returns at once).
	grown := runtime.NumGoroutine() - before
	for deadline := time.Now().Add(20 * time.Second); grown > 1 && time.Now().Before(deadline); {
		runtime.Gosched()
		grown = runtime.NumGoroutine() - before
	}
	close(release)
	if grown > 1 {
		t.Fatalf("200 probes of a panicking check with a blocked hook grew %d goroutines, want at most 1", grown)
	}
}
