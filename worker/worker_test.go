package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
)

// withLoop returns a harness (newHarness) whose worker has one loop,
// "jobs", on src, run by handle, fetching for fetchWait (0: the default).
func withLoop(t *testing.T, cfg worker.Config, vars map[string]string, src worker.Source, handle func(context.Context, worker.Job) error, fetchWait time.Duration) *harness {
	t.Helper()
	h := newHarness(t, cfg, vars)
	if err := h.addLoop(worker.Loop{Name: "jobs", Source: src, Handle: handle, FetchWait: fetchWait}); err != nil {
		t.Fatal(err)
	}
	return h
}

// serving starts a worker with one loop on src and takes it through its
// first cycle.
func serving(t *testing.T, cfg worker.Config, vars map[string]string, src *fakeSource, hd *handler) *harness {
	t.Helper()
	h := withLoop(t, cfg, vars, src, hd.Handle, time.Second)
	h.boot(src)
	awaitFetch(t, src)
	// The epoch poller's timer, the only one while the loop waits in its
	// fetch: armed before the test counts timers (shutdown and nextPoll
	// count on it being there already).
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := h.clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the epoch poller never armed its timer: %v", err)
	}
	return h
}

// beforeTheFirstCycle returns a running one-loop runner whose loop has
// asked for a job but not cycled yet, and its source; cycle makes the
// loop cycle once, idle, and waits for StartupDone.
func beforeTheFirstCycle(t *testing.T) (h *harness, cycle func()) {
	src, hd := newSource(), newHandler()
	h = withLoop(t, worker.Config{}, nil, src, hd.Handle, 0)
	h.run()
	awaitFetch(t, src) // the loop runs, but has not cycled
	return h, func() {
		src.idleCycle(t)
		h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
	}
}

func TestReadinessStartingUntilTheFirstCycle(t *testing.T) {
	h, cycle := beforeTheFirstCycle(t)
	h.expect("/readyz", 503, "starting")
	h.expect("/healthz", 200, "ok")
	cycle()
	h.expect("/readyz", 200, "ok")
	h.expect("/healthz", 200, "ok")
}

func TestLivenessStalledAfterTheThreshold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fetchWait time.Duration
		threshold time.Duration
	}{
		{"floor of two minutes", time.Second, 2 * time.Minute},
		{"twenty fetch waits", 10 * time.Second, 200 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, hd := newSource(), newHandler()
			h := withLoop(t, worker.Config{}, nil, src, hd.Handle, tc.fetchWait)
			h.boot(src)
			awaitFetch(t, src) // from here on the consumer never answers again
			h.clock.Advance(tc.threshold)
			h.expect("/healthz", 200, "ok") // at the threshold: still alive
			h.expect("/readyz", 200, "ok")
			h.clock.Advance(7*time.Minute + 12*time.Second - tc.threshold)
			body := h.expect("/healthz", 503, "stalled")
			if body["idle_for"] != "7m12s" || body["loop"] != "jobs" || body["threshold"] != tc.threshold.String() {
				t.Fatalf("body %v: want idle_for 7m12s, loop jobs, threshold %s", body, tc.threshold)
			}
			if body["version"] == nil || body["commit"] == nil {
				t.Fatalf("body %v lacks version and commit", body)
			}
			// One more cycle and it is alive again.
			src.idleCycle(t)
			awaitFetch(t, src)
			h.expect("/healthz", 200, "ok")
		})
	}
}

func TestLivenessNamesTheLoopThatStalled(t *testing.T) {
	a, b, hd := newSource(), newSource(), newHandler()
	h := newHarness(t, worker.Config{}, nil)
	for name, src := range map[string]*fakeSource{"orders": a, "emails": b} {
		if err := h.addLoop(worker.Loop{Name: name, Source: src, Handle: hd.Handle, FetchWait: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	h.run()
	for _, src := range []*fakeSource{a, b} {
		awaitFetch(t, src)
		src.idleCycle(t)
		awaitFetch(t, src)
	}
	h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
	// emails keeps cycling every minute; orders never again.
	for range 3 {
		h.clock.Advance(time.Minute)
		b.idleCycle(t)
		awaitFetch(t, b)
	}
	body := h.expect("/healthz", 503, "stalled")
	if body["loop"] != "orders" || body["idle_for"] != "3m0s" {
		t.Fatalf("body %v: want loop orders idle for 3m0s", body)
	}
}

func TestLivenessAliveWhileAJobRunsForHours(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, nil, src, hd)
	j, _ := startJob(t, src, hd, "job-1")
	h.clock.Advance(10 * time.Hour)
	h.expect("/healthz", 200, "ok")
	hd.finish(t, nil)
	if got := j.outcome(t); got != "ack" {
		t.Fatalf("job ended %q; want ack", got)
	}
	awaitFetch(t, src)
	h.expect("/healthz", 200, "ok") // the job's end is a cycle
}

func TestDrainCompleteFinishesTheJob(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, nil, src, hd)
	j, ctx := startJob(t, src, hd, "job-1")
	h.shutdown()
	body := h.expect("/readyz", 503, "draining")
	if body["busy"] != true {
		t.Fatalf("body %v: want busy true", body)
	}
	// However long, within the 8h bound: no timer fires (the bound's and the
	// epoch poller's are the only ones), so nothing can cancel the job
	// after this check either.
	if n := h.clock.Advance(3 * time.Hour); n != 0 {
		t.Fatalf("%d timer(s) fired 3h into an 8h drain bound", n)
	}
	h.expect("/healthz", 200, "ok")
	if ctx.Err() != nil {
		t.Fatal("complete mode cancelled the job")
	}
	hd.finish(t, nil)
	if got := j.outcome(t); got != "ack" {
		t.Fatalf("job ended %q; want ack", got)
	}
	if err := h.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n, _ := hd.calls.Load("job-1"); *n.(*int) != 1 {
		t.Fatalf("job ran %d times", *n.(*int))
	}
	if !strings.Contains(h.logs.String(), "drain waits done") {
		t.Fatalf("logs lack the end of the drain wait")
	}
}

func TestDrainIdleReportsNotBusy(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{Lifecycle: lameduck.Config{ShutdownDelay: time.Minute}}, nil, src, hd)
	h.shutdown()
	body := h.expect("/readyz", 503, "draining")
	if body["busy"] != false {
		t.Fatalf("body %v: want busy false", body)
	}
	h.expect("/healthz", 200, "ok")
	// Advance until the 1m window ends: shutdown's timer count may have
	// been met by the drain wait's bound while the window, having read the
	// clock, had not armed its own timer yet (a single Advance could then
	// land before it and leave it due a minute later).
	ended := h.w.Lifecycle().Events().WindowEnded
	for giveUp := time.Now().Add(guard); !ended.Fired(); {
		if time.Now().After(giveUp) {
			t.Fatal("the window never ended")
		}
		h.clock.Advance(time.Minute)
		select {
		case <-ended.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := h.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(src.fetches); n != 0 {
		t.Fatalf("%d fetch(es) after the signal", n)
	}
}

func TestDrainCompleteBoundCancelsTheJobAndNamesIt(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, map[string]string{"LAMEDUCK_DRAIN_TIMEOUT": "1h"}, src, hd)
	j, ctx := startJob(t, src, hd, "job-7")
	h.clock.Advance(30 * time.Minute) // the job is 30m old at the signal
	h.shutdown()
	h.expect("/readyz", 503, "draining")
	h.clock.Advance(time.Hour)
	awaitCancel(t, ctx, worker.ErrDrainBound, "the job's context was not cancelled at the bound")
	j.wantHandedBackAtOnce(t)
	_ = h.wait()
	logs := h.logs.String()
	if !strings.Contains(logs, "drain bound 1h0m0s reached: cancelling job job-7 of loop jobs (age 1h30m0s)") {
		t.Fatalf("logs do not name the job with its age:\n%s", logs)
	}
}

func TestDrainInterruptCancelsAndHandsBack(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, map[string]string{"LAMEDUCK_DRAIN_MODE": "interrupt"}, src, hd)
	j, ctx := startJob(t, src, hd, "job-3")
	h.shutdown()
	awaitCancel(t, ctx, worker.ErrInterrupted, "interrupt mode did not cancel the job at the signal")
	j.wantHandedBackAtOnce(t)
	if err := h.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(h.logs.String(), "job handed back: "+worker.ErrInterrupted.Error()) {
		t.Fatalf("logs lack the hand-back:\n%s", h.logs)
	}
}

// epochs is an EpochSource the test moves.
type epochs struct {
	newest chan uint64
	mu     sync.Mutex
	last   uint64 // guarded by mu
	fail   bool   // guarded by mu
}

func (e *epochs) setFail() { e.mu.Lock(); e.fail = true; e.mu.Unlock() }

func (e *epochs) Newest(_ context.Context, mine uint64) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case n := <-e.newest:
		e.last = n
	default:
	}
	if e.fail {
		return 0, errors.New("store unreachable")
	}
	return max(e.last, mine), nil
}

// advanceIdle moves the fake clock by d, n times, each once the worker's
// timers (the epoch poller's and the idle loop's pause) are armed again,
// and returns once they are armed after the last advance too: the worker
// has then gone round once more, so what it did in that round can be
// checked without racing it (noFetch).
func (h *harness) advanceIdle(n int, d time.Duration, timers int) {
	h.t.Helper()
	armed := func() {
		h.t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if err := h.clock.WaitForTimers(ctx, timers); err != nil {
			h.t.Fatalf("the worker's timers were never armed again (a loop blocked in a fetch does not pause): %v", err)
		}
	}
	for range n {
		armed()
		h.clock.Advance(d)
	}
	armed()
}

// noFetch fails when the loop has begun a fetch since the last one seen.
// It does not wait: call it once the loop has shown it went round without
// fetching (advanceIdle returns then; a fetch begins before the pause that
// advanceIdle waits for, and a loop blocked in one never pauses again).
func noFetch(t *testing.T, s *fakeSource, when string) {
	t.Helper()
	select {
	case <-s.fetches:
		t.Fatalf("the loop fetched %s", when)
	default:
	}
}

// A runner superseded from its start competes for no job: it never
// fetches, so the newer fleet gets them all; it turns started, and stays
// alive however long it idles.
func TestSupersededAtBootFetchesNothingAndStaysAlive(t *testing.T) {
	src, hd := newSource(), newHandler()
	cfg := worker.Config{Epochs: worker.StaticEpochs(5)}
	h := withLoop(t, cfg, map[string]string{"LAMEDUCK_EPOCH": "4"}, src, hd.Handle, time.Second)
	h.run()
	h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
	body := h.expect("/readyz", 503, "superseded")
	if body["epoch"] != float64(4) || body["newest_epoch"] != float64(5) {
		t.Fatalf("body %v: want epoch 4, newest 5", body)
	}
	h.expect("/startupz", 200, "ok")
	// Ten minutes idle, five times the 2m liveness threshold: alive, and not
	// one fetch.
	h.advanceIdle(20, 30*time.Second, 2)
	noFetch(t, src, "while superseded")
	h.expect("/healthz", 200, "ok")

	// The newest runner is not superseded.
	src2, hd2 := newSource(), newHandler()
	h2 := serving(t, cfg, map[string]string{"LAMEDUCK_EPOCH": "5"}, src2, hd2)
	h2.expect("/readyz", 200, "ok")
}

// A runner superseded while a fetch is under way hands the job that fetch
// delivers back once, delayed, and fetches no more; when the newer runners
// are gone (a rollback) it is no longer superseded and fetches again.
func TestSupersededHandsBackOnceStopsFetchingAndRollsBack(t *testing.T) {
	src, hd := newSource(), newHandler()
	e := &epochs{newest: make(chan uint64, 1)}
	h := serving(t, worker.Config{Epochs: e, EpochPoll: time.Second},
		map[string]string{"LAMEDUCK_EPOCH": "2", "LAMEDUCK_EPOCH_MISMATCH_DELAY": "90s"}, src, hd)
	h.expect("/readyz", 200, "ok")
	send(t, e.newest, 3, "epoch 3") // an epoch-3 runner came up
	h.nextPoll()
	waitFor(t, func() bool { c, _ := h.probe("/readyz"); return c == 503 })
	h.expect("/readyz", 503, "superseded")

	j := newJob("job-1") // delivered to the fetch under way
	src.deliver(t, j)
	if got := j.outcome(t); got != "back 1m30s" {
		t.Fatalf("job ended %q; want handed back with the mismatch delay", got)
	}
	if _, ran := hd.calls.Load("job-1"); ran {
		t.Fatal("a superseded runner ran the job")
	}
	h.advanceIdle(10, 30*time.Second, 2) // 5m: past the 2m liveness threshold
	noFetch(t, src, "after handing the job back, while superseded")
	h.expect("/healthz", 200, "ok")
	h.expect("/readyz", 503, "superseded")

	send(t, e.newest, 2, "epoch 2") // the epoch-3 runners are gone: a rollback
	h.nextPoll()
	awaitFetch(t, src)
	h.expect("/readyz", 200, "ok")
	if !strings.Contains(h.logs.String(), "no longer superseded") {
		t.Fatal("the rollback was not logged")
	}
	j2 := newJob("job-2")
	src.deliver(t, j2)
	hd.awaitStart(t)
	hd.finish(t, nil)
	if got := j2.outcome(t); got != "ack" {
		t.Fatalf("job after the rollback ended %q; want ack", got)
	}
}

func TestEpochBumpWhileServingAndAnUnreachableStore(t *testing.T) {
	src, hd := newSource(), newHandler()
	e := &epochs{newest: make(chan uint64, 1)}
	h := serving(t, worker.Config{Epochs: e, EpochPoll: time.Second}, map[string]string{"LAMEDUCK_EPOCH": "1"}, src, hd)
	h.expect("/readyz", 200, "ok")
	// A job in flight when the fleet moves on finishes here: never run twice.
	j, _ := startJob(t, src, hd, "job-1")
	send(t, e.newest, 2, "epoch 2")
	h.nextPoll()
	waitFor(t, func() bool { c, _ := h.probe("/readyz"); return c == 503 })
	h.expect("/readyz", 503, "superseded")
	hd.finish(t, nil)
	if got := j.outcome(t); got != "ack" {
		t.Fatalf("job in flight ended %q; want ack", got)
	}
	// The store goes away: the last answer stands, logged once.
	e.setFail()
	// Two polls. Not nextPoll: the superseded loop pauses on its own timer,
	// which would satisfy nextPoll's count before the poller has re-armed
	// after its last poll; wait for both timers (both 1s) each time.
	h.advanceIdle(2, time.Second, 2)
	waitFor(t, func() bool { return strings.Contains(h.logs.String(), "epoch source unreachable") })
	h.expect("/readyz", 503, "superseded")
	if n := strings.Count(h.logs.String(), "epoch source unreachable"); n != 1 {
		t.Fatalf("unreachable logged %d times", n)
	}
}

// waitFor polls cond, for state that only a goroutine of the worker's can
// change; it fails after guard.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReadinessChecksStillApply(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := newHarness(t, worker.Config{}, nil)
	if err := errors.Join(
		h.addLoop(worker.Loop{Name: "jobs", Source: src, Handle: hd.Handle}),
		h.w.Lifecycle().AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return errors.New("down") }}),
	); err != nil {
		t.Fatal(err)
	}
	h.boot(src)
	body := h.expect("/readyz", 503, "failed")
	// ProbeHandler stands for a listener that also serves the application:
	// the outcome word, without the error's text (docs/security.md).
	if checks, _ := body["checks"].(map[string]any); checks["db"] != "error" {
		t.Fatalf("body %v", body)
	}
}

func TestRunnerConfiguration(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		h := newHarness(t, worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "x"}}, map[string]string{"LAMEDUCK_ENV": "kubernetes"})
		c := h.w.Lifecycle().Config()
		if c.DrainMode != worker.DrainComplete || c.DrainTimeout != 8*time.Hour || c.ShutdownDelay != lameduck.NoDelay {
			t.Fatalf("resolved %+v", c)
		}
		res, errs := worker.Resolve(worker.Config{Lifecycle: lameduck.Config{LookupEnv: func(k string) (string, bool) { return "kubernetes", k == "LAMEDUCK_ENV" }}})
		if len(errs) > 0 || res.Config.DrainTimeout != 8*time.Hour || res.EpochMismatchDelay != 2*time.Minute || res.FetchWait != 5*time.Second || res.Epoch != 0 {
			t.Fatalf("resolved %+v %v", res, errs)
		}
		w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false }}})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Lifecycle().Config().ProbeAddr; got != ":9090" {
			t.Fatalf("ProbeAddr %q; want :9090", got)
		}
	})
	t.Run("environment", func(t *testing.T) {
		vars := map[string]string{"LAMEDUCK_DRAIN_MODE": "interrupt", "LAMEDUCK_DRAIN_TIMEOUT": "2h",
			"LAMEDUCK_EPOCH": "12", "LAMEDUCK_EPOCH_MISMATCH_DELAY": "30s", "LAMEDUCK_FETCH_WAIT": "20s"}
		h := newHarness(t, worker.Config{}, vars)
		c := h.w.Lifecycle().Config()
		if c.DrainMode != worker.DrainInterrupt || c.DrainTimeout != 2*time.Hour {
			t.Fatalf("resolved %+v", c)
		}
		res, errs := worker.Resolve(worker.Config{Lifecycle: lameduck.Config{LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}})
		if len(errs) > 0 || res.Config.DrainMode != worker.DrainInterrupt || res.Epoch != 12 ||
			res.EpochMismatchDelay != 30*time.Second || res.FetchWait != 20*time.Second {
			t.Fatalf("resolved %+v %v", res, errs)
		}
	})
	for _, tc := range []struct{ name, value, want string }{
		{"DRAIN_MODE", "idle", `LAMEDUCK_DRAIN_MODE="idle": a runner drains in mode "complete"`},
		{"DRAIN_MODE", "finish", `LAMEDUCK_DRAIN_MODE="finish"`},
		{"DRAIN_TIMEOUT", "8", `LAMEDUCK_DRAIN_TIMEOUT="8": a duration needs a unit`},
		{"EPOCH", "-1", `LAMEDUCK_EPOCH="-1": not a non-negative integer; set it to a non-negative integer`},
		{"EPOCH", "v2", `LAMEDUCK_EPOCH="v2"`},
		{"EPOCH_MISMATCH_DELAY", "2", `LAMEDUCK_EPOCH_MISMATCH_DELAY="2": a duration needs a unit`},
		{"FETCH_WAIT", "0s", `LAMEDUCK_FETCH_WAIT="0s": must be greater than zero`},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			_, err := worker.New(worker.Config{Lifecycle: lameduck.Config{
				LookupEnv: func(k string) (string, bool) { return tc.value, k == "LAMEDUCK_"+tc.name },
			}})
			if !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want %q", err, tc.want)
			}
		})
	}
	t.Run("a server refuses runner modes", func(t *testing.T) {
		_, err := lameduck.New(lameduck.Config{LookupEnv: func(k string) (string, bool) { return "complete", k == "LAMEDUCK_DRAIN_MODE" }})
		if !errors.As(err, new(*lameduck.ConfigError)) {
			t.Fatalf("err %v", err)
		}
	})
}

func TestBudgetLogDoesTheRunnerArithmetic(t *testing.T) {
	for _, tc := range []struct {
		grace, drain, want string
	}{
		// The teardown's default is what the grace period leaves: 29100s − 8h − a 10s margin.
		{"29100s", "8h", "shutdown budget runner drain bound 8h0m0s + teardown 4m50s = 8h4m50s ≤ terminationGracePeriodSeconds 8h5m0s (margin 10s)"},
		// The drain bound's default is what the grace leaves after a 30s teardown and the margin.
		{"29100s", "", "shutdown budget runner drain bound 8h4m20s + teardown 30s = 8h4m50s ≤ terminationGracePeriodSeconds 8h5m0s (margin 10s)"},
		// An explicit bound longer than the grace allows: a warning with both numbers and the fix.
		{"1h", "8h", "level=WARN msg=\"lameduck: shutdown budget does not fit: runner drain bound 8h0m0s + teardown 1s = 8h0m1s > terminationGracePeriodSeconds 1h0m0s; " +
			"the kubelet will SIGKILL the pod mid-teardown; lower LAMEDUCK_DRAIN_TIMEOUT or LAMEDUCK_SHUTDOWN_TEARDOWN, or raise terminationGracePeriodSeconds to at least 8h0m1s\""},
	} {
		src, hd := newSource(), newHandler()
		vars := map[string]string{"LAMEDUCK_ENV": "kubernetes", "LAMEDUCK_TERMINATION_GRACE": tc.grace}
		if tc.drain != "" {
			vars["LAMEDUCK_DRAIN_TIMEOUT"] = tc.drain
		}
		h := serving(t, worker.Config{}, vars, src, hd)
		if logs := h.logs.String(); !strings.Contains(logs, tc.want) || !strings.Contains(logs, "runner=true epoch=0") {
			t.Fatalf("logs lack %q (and runner=true epoch=0):\n%s", tc.want, logs)
		}
	}
}

func TestAddLoopErrors(t *testing.T) {
	h := newHarness(t, worker.Config{}, nil)
	src, hd := newSource(), newHandler()
	ok := worker.Loop{Name: "jobs", Source: src, Handle: hd.Handle}
	if err := h.addLoop(ok); err != nil {
		t.Fatal(err)
	}
	for _, l := range []worker.Loop{ok, {Name: "x", Source: src}, {Name: "y", Source: src, Handle: hd.Handle, FetchWait: -time.Second}} {
		if err := h.addLoop(l); err == nil {
			t.Fatalf("AddLoop(%+v) accepted", l)
		}
	}
	if _, err := worker.New(worker.Config{LivenessFloor: -1}); !errors.As(err, new(*lameduck.ConfigError)) {
		t.Fatalf("negative floor: %v", err)
	}
	_ = http.StatusOK
}

// panicJob panics when the loop settles it.
type panicJob struct{ *fakeJob }

func (j panicJob) Ack(context.Context) error { panic("ack exploded") }

func TestPanicsInHandleAndAckAreRecovered(t *testing.T) {
	src := newSource()
	var panics []string
	var mu sync.Mutex
	calls := 0
	h := withLoop(t, worker.Config{Lifecycle: lameduck.Config{OnPanic: func(what string, v any, _ []byte) {
		mu.Lock()
		defer mu.Unlock()
		panics = append(panics, fmt.Sprint(what, ": ", v))
	}}}, nil, src, func(context.Context, worker.Job) error {
		if calls++; calls == 1 {
			panic("handler exploded")
		}
		return nil
	}, time.Second)
	h.boot(src)
	j1 := newJob("job-1")
	src.deliver(t, j1)
	if got := j1.outcome(t); got != "back 1s" {
		t.Fatalf("a panicking handler's job ended %q; want handed back after the failure backoff", got)
	}
	j2 := panicJob{newJob("job-2")}
	src.deliver(t, j2)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(panics) == 2 })
	j3 := newJob("job-3")
	src.deliver(t, j3) // the loop goes on after the panicking Ack
	if got := j3.outcome(t); got != "ack" {
		t.Fatalf("job after the panics ended %q", got)
	}
	h.expect("/healthz", 200, "ok")
	mu.Lock()
	defer mu.Unlock()
	if len(panics) != 2 || panics[0] != "job jobs: handler exploded" || panics[1] != "ack jobs: ack exploded" {
		t.Fatalf("OnPanic got %q", panics)
	}
}

// docs/runners.md: "/startupz: 503 starting, then 200 ok — 200 once every
// loop has cycled once".
func TestStartupzWaitsForTheFirstCycle(t *testing.T) {
	h, cycle := beforeTheFirstCycle(t)
	h.expect("/startupz", 503, "starting")
	cycle()
	h.expect("/startupz", 200, "ok")
}
