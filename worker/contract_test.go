package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// deliveredJob records the cause its HandBack was given, and how it ended.
type deliveredJob struct {
	*fakeJob
	cause    chan error
	delivery int
}

func newDeliveredJob(id string, delivery int) *deliveredJob {
	return &deliveredJob{fakeJob: newJob(id), cause: make(chan error, 1), delivery: delivery}
}

func (j *deliveredJob) HandBack(ctx context.Context, d time.Duration) error {
	j.cause <- worker.HandBackCause(ctx)
	return j.fakeJob.HandBack(ctx, d)
}

func (j *deliveredJob) Delivery() int { return j.delivery }

// The drain never cancels a fetch under way (a queue cannot un-send what
// it delivers into it): the loop waits for it, and a job it returns is
// handed back unstarted, at once, for the runner's reason.
func TestAFetchUnderWayAtTheDrainIsWaitedForAndItsJobHandedBack(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := newHarness(t, worker.Config{}, nil)
	// Added to the worker directly: the harness does not expire this
	// source's fetches at the drain, so the fetch stays under way.
	if err := h.w.AddLoop(worker.Loop{Name: "jobs", Source: src, Handle: hd.Handle, FetchWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	h.boot(src)
	awaitFetch(t, src)
	h.w.Lifecycle().BeginShutdown("test")
	h.awaitEvent(h.w.Lifecycle().Events().ShutdownInitiated)
	j := newDeliveredJob("late-1", 1)
	src.deliver(t, j) // the fetch was still waiting: the drain did not cancel it
	if got := j.outcome(t); got != "back 0s" {
		t.Fatalf("the late job ended %q; want handed back at once", got)
	}
	if cause := <-j.cause; !errors.Is(cause, worker.ErrNotStarted) {
		t.Fatalf("hand-back cause %v; want ErrNotStarted", cause)
	}
	select {
	case <-hd.started:
		t.Fatal("the job delivered at the drain was started")
	default:
	}
	if err := h.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A handler that returns nil after the drain bound cancelled it has done
// its job: it is acknowledged, the log says so, and Run does not count it
// cut (no ErrDrainBound, exit 0).
func TestAJobDoneAfterTheBoundIsAckedNotCut(t *testing.T) {
	src := newSource()
	started, release := make(chan context.Context, 1), make(chan struct{})
	h := withLoop(t, worker.Config{}, map[string]string{"LAMEDUCK_DRAIN_TIMEOUT": "1m"}, src, func(ctx context.Context, _ worker.Job) error {
		started <- ctx
		<-release // finishes its work although asked to stop
		return nil
	}, time.Second)
	h.boot(src)
	j := newJob("job-9")
	src.deliver(t, j)
	ctx := testsupport.Recv(t, started, "the job to start")
	h.shutdown()
	h.clock.Advance(time.Minute)
	awaitCancel(t, ctx, nil, "the bound did not cancel the job")
	close(release)
	if got := j.outcome(t); got != "ack" {
		t.Fatalf("job ended %q; want acknowledged", got)
	}
	if err := h.wait(); err != nil {
		t.Fatalf("Run returned %v for a job that was acknowledged; want nil", err)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "job done and acknowledged: its handler returned nil after it was asked to stop ("+worker.ErrDrainBound.Error()+")") {
		t.Fatalf("logs do not say the job was acknowledged:\n%s", logs)
	}
	if strings.Contains(logs, "cut at the drain bound") {
		t.Fatalf("logs count the acknowledged job as cut:\n%s", logs)
	}
}

// A failed job is handed back after FailureBackoff × 2^(delivery−1), at
// most FailureBackoffMax, for its own failure (cause nil).
func TestFailedJobsBackOffByDelivery(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		delivery int
		want     string
	}{
		{"first delivery, default", nil, 1, "back 1s"},
		{"third delivery, default", nil, 3, "back 4s"},
		{"capped", map[string]string{"LAMEDUCK_FAILURE_BACKOFF": "2s", "LAMEDUCK_FAILURE_BACKOFF_MAX": "5s"}, 4, "back 5s"},
		{"a huge delivery count stays at the cap", nil, 1 << 20, "back 5m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, hd := newSource(), newHandler()
			serving(t, worker.Config{}, tc.vars, src, hd)
			j := newDeliveredJob("job-f", tc.delivery)
			src.deliver(t, j)
			hd.awaitStart(t)
			hd.finish(t, errors.New("boom"))
			if got := j.outcome(t); got != tc.want {
				t.Fatalf("job ended %q; want %q", got, tc.want)
			}
			if cause := <-j.cause; cause != nil {
				t.Fatalf("hand-back cause %v; want nil (the job's own failure)", cause)
			}
		})
	}
}

func TestFailureBackoffAboveItsCapIsAnError(t *testing.T) {
	_, err := worker.New(worker.Config{FailureBackoff: time.Minute, FailureBackoffMax: time.Second})
	if err == nil || !strings.Contains(err.Error(), `FAILURE_BACKOFF="1m0s": above LAMEDUCK_FAILURE_BACKOFF_MAX=1s`) {
		t.Fatalf("New: %v; want an error naming both settings", err)
	}
	_, errs := worker.Resolve(worker.Config{FailureBackoff: time.Minute, FailureBackoffMax: time.Second})
	if len(errs) != 1 {
		t.Fatalf("Resolve: %v; want the same one error", errs)
	}
}

// consumingSource tells the loop the queue holds its request, then waits.
type consumingSource struct{ *fakeSource }

func (s consumingSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	worker.Consuming(ctx)
	return s.fakeSource.Fetch(ctx, wait)
}

// Readiness turns 200 once each loop's Source says it is consuming, not
// after a whole idle fetch.
func TestReadinessWhenTheSourceSaysItIsConsuming(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := newHarness(t, worker.Config{}, nil)
	if err := h.addLoop(worker.Loop{Name: "jobs", Source: consumingSource{src}, Handle: hd.Handle}); err != nil {
		t.Fatal(err)
	}
	h.run()
	awaitFetch(t, src) // under way, never answered
	h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
	h.expect("/readyz", 200, "ok")
	worker.Consuming(context.Background()) // a ctx no loop made: nothing happens
}

// drainingSource counts its Drain calls and when they came.
type drainingSource struct {
	*fakeSource
	drains   atomic.Int32
	fetching atomic.Int32 // fetches under way
	early    atomic.Bool  // Drain came while a fetch was under way
	err      error
}

func (s *drainingSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	s.fetching.Add(1)
	defer s.fetching.Add(-1)
	return s.fakeSource.Fetch(ctx, wait)
}

func (s *drainingSource) Drain(context.Context) error {
	if s.fetching.Load() != 0 {
		s.early.Store(true)
	}
	s.drains.Add(1)
	return s.err
}

// A Source that is a Drainer is drained once, however many loops share
// it, after every loop has returned; its error is logged in its own words.
func TestADrainerIsDrainedOnceAfterItsLoops(t *testing.T) {
	src := &drainingSource{fakeSource: newSource(), err: errors.New("a pull request abandoned at 12:00:01 may still deliver one job: it returns after the ack wait 30s")}
	h := newHarness(t, worker.Config{}, nil)
	for _, name := range []string{"a", "b"} {
		if err := h.addLoop(worker.Loop{Name: name, Source: src, Handle: newHandler().Handle, FetchWait: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	h.run()
	awaitFetch(t, src.fakeSource)
	awaitFetch(t, src.fakeSource)
	src.idleUntil(t, h.w.Lifecycle().Events().StartupDone)
	h.shutdown()
	_ = h.wait()
	if n := src.drains.Load(); n != 1 {
		t.Fatalf("Drain called %d times; want once", n)
	}
	if src.early.Load() {
		t.Fatal("Drain was called while a fetch was under way")
	}
	if !strings.Contains(h.logs.String(), "a pull request abandoned at 12:00:01") {
		t.Fatalf("logs lack the Drainer's error:\n%s", h.logs)
	}
}

// hangingAckJob's Ack waits for its context to end.
type hangingAckJob struct {
	*fakeJob
	entered chan struct{}
	ackErr  chan error
}

func (j *hangingAckJob) Ack(ctx context.Context) error {
	close(j.entered)
	<-ctx.Done()
	j.ackErr <- ctx.Err()
	return ctx.Err()
}

// An Ack that hangs (a dead connection, a client without a timeout) keeps
// the job the loop's: /healthz says busy, and the Ack's context ends when
// the teardown's hook share does, so Run returns; it never hangs forever
// on context.Background.
func TestAHangingAckIsBusyAndBounded(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, map[string]string{"LAMEDUCK_DRAIN_TIMEOUT": "1m"}, src, hd)
	j := &hangingAckJob{fakeJob: newJob("job-a"), entered: make(chan struct{}), ackErr: make(chan error, 1)}
	src.deliver(t, j)
	hd.awaitStart(t)
	hd.finish(t, nil)
	select {
	case <-j.entered:
	case <-time.After(guard):
		t.Fatal("the loop never acknowledged the job")
	}
	if code, body := h.probe("/healthz"); code != 200 || body["busy"] != true || body["job"] != "job-a" {
		t.Fatalf("/healthz %d %v while the job's Ack hangs; want 200 busy with job-a", code, body)
	}
	h.w.Lifecycle().BeginShutdown("test")
	go func() { // past the bound and the hook share, on the fake clock
		for {
			select {
			case <-h.returned:
				return
			case <-time.After(10 * time.Millisecond):
				h.clock.Advance(time.Minute)
			}
		}
	}()
	select {
	case err := <-j.ackErr:
		if err == nil {
			t.Fatal("Ack returned with its context not done")
		}
	case <-time.After(guard):
		t.Fatal("the hanging Ack's context never ended")
	}
	_ = h.wait()
}

// bothSource returns a job and an error from one fetch.
type bothSource struct {
	*fakeSource
	job *deliveredJob
	did atomic.Bool
}

func (s *bothSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	if !s.did.Swap(true) {
		return s.job, errors.New("half-read frame")
	}
	return s.fakeSource.Fetch(ctx, wait)
}

// A Fetch that returns a job and an error, against the contract, does not
// drop the job: it is handed back unstarted.
func TestAJobReturnedWithAnErrorIsHandedBack(t *testing.T) {
	src := &bothSource{fakeSource: newSource(), job: newDeliveredJob("job-b", 1)}
	h := newHarness(t, worker.Config{}, nil)
	if err := h.addLoop(worker.Loop{Name: "jobs", Source: src, Handle: newHandler().Handle, FetchWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if got := src.job.outcome(t); got != "back 0s" {
		t.Fatalf("the job ended %q; want handed back at once", got)
	}
	if cause := <-src.job.cause; !errors.Is(cause, worker.ErrNotStarted) {
		t.Fatalf("cause %v; want ErrNotStarted", cause)
	}
}
