package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/worker"
)

// A job whose ID is empty (a message without an id header) is in flight
// like any other: liveness stays 200 however long it runs, readiness says
// busy while draining, and the drain's bound or its interrupt cancels it.
// The logs name it by its delivery's number in the loop.
func TestAJobWithAnEmptyIDIsInFlight(t *testing.T) {
	t.Run("complete", func(t *testing.T) {
		src, hd := newSource(), newHandler()
		h := serving(t, worker.Config{}, map[string]string{"LAMEDUCK_DRAIN_TIMEOUT": "1h"}, src, hd)
		j, ctx := startJob(t, src, hd, "")
		h.clock.Advance(10 * time.Hour) // 300 × the 2m stall threshold
		h.expect("/healthz", 200, "ok")
		h.shutdown()
		body := h.expect("/readyz", 503, "draining")
		if body["busy"] != true || body["jobs_in_flight"] != float64(1) {
			t.Fatalf("draining /readyz %v: want busy true, 1 job in flight", body)
		}
		h.clock.Advance(time.Hour)
		awaitCancel(t, ctx, worker.ErrDrainBound, "the drain bound did not cancel the job")
		j.wantHandedBackAtOnce(t)
		if err := h.wait(); !errors.Is(err, worker.ErrDrainBound) {
			t.Fatalf("Run: %v; want ErrDrainBound", err)
		}
		if logs := h.logs.String(); !strings.Contains(logs, "cancelling job jobs#1 of loop jobs") {
			t.Fatalf("the bound's line does not name the job jobs#1:\n%s", logs)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		src, hd := newSource(), newHandler()
		h := serving(t, worker.Config{}, map[string]string{"LAMEDUCK_DRAIN_MODE": "interrupt"}, src, hd)
		j, ctx := startJob(t, src, hd, "")
		h.shutdown()
		awaitCancel(t, ctx, nil, "interrupt mode did not cancel the job at the signal")
		j.wantHandedBackAtOnce(t)
		if err := h.wait(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if logs := h.logs.String(); !strings.Contains(logs, "job=jobs#1") {
			t.Fatalf("logs do not name the job jobs#1:\n%s", logs)
		}
	})
}

// Startup tasks the application adds to a runner's Lifecycle run before
// the loops start: no job is fetched while a migration runs.
func TestLoopsStartAfterTheApplicationsStartupTasks(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := newHarness(t, worker.Config{}, nil)
	ran, release := make(chan int, 1), make(chan struct{})
	if err := errors.Join(
		h.addLoop(worker.Loop{Name: "jobs", Source: src, Handle: hd.Handle, FetchWait: time.Second}),
		h.w.Lifecycle().AddStartupTask("migrate", func(context.Context) error { ran <- len(src.fetches); <-release; return nil }),
	); err != nil {
		t.Fatal(err)
	}
	h.run()
	select {
	case <-src.fetches:
		t.Fatal("the loop fetched before the startup task migrate ran")
	case n := <-ran:
		if n != 0 {
			t.Fatalf("the loop fetched %d time(s) before the startup task migrate ran", n)
		}
	case <-time.After(guard):
		t.Fatal("neither the startup task nor the loop ran")
	}
	h.expect("/startupz", 503, "starting")
	close(release)
	awaitFetch(t, src)
	src.idleCycle(t)
	h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
	h.expect("/readyz", 200, "ok")
}

// A second Run is refused with no side effect: the first run's job goes
// on, its loop fetches again after it, and readiness is unchanged.
func TestASecondRunChangesNothing(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, nil, src, hd)
	j, ctx := startJob(t, src, hd, "job-1")
	second := make(chan error, 1)
	go func() { second <- h.w.Run(context.Background()) }()
	select {
	case err := <-second:
		if err == nil || !strings.Contains(err.Error(), "already running") {
			t.Fatalf("second Run: %v; want an error saying the worker is already running", err)
		}
	case <-time.After(guard):
		t.Fatal("the second Run did not return")
	}
	if ctx.Err() != nil {
		t.Fatalf("the refused Run cancelled the first run's job: %v", context.Cause(ctx))
	}
	h.expect("/readyz", 200, "ok")
	hd.finish(t, nil)
	if got := j.outcome(t); got != "ack" {
		t.Fatalf("job ended %q; want ack", got)
	}
	awaitFetch(t, src) // the loop goes on
	if h.w.Lifecycle().Events().ShutdownInitiated.Fired() {
		t.Fatal("the refused Run began the shutdown")
	}
}

// idPanicJob panics in ID.
type idPanicJob struct{ *fakeJob }

func (idPanicJob) ID() string { panic("id exploded") }

// A panic in Job.ID, like one in Fetch, Handle, Ack or HandBack, is
// recovered and handed to OnPanic; the job runs, named by its delivery.
func TestAPanicInJobIDIsRecovered(t *testing.T) {
	src := newSource()
	var mu sync.Mutex
	var panics []string
	h := newHarness(t, worker.Config{Lifecycle: lameduck.Config{OnPanic: func(what string, v any, _ []byte) {
		mu.Lock()
		defer mu.Unlock()
		panics = append(panics, fmt.Sprint(what, ": ", v))
	}}}, nil)
	if err := h.addLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Second,
		Handle: func(context.Context, worker.Job) error { return errors.New("boom") }}); err != nil {
		t.Fatal(err)
	}
	h.run()
	j := idPanicJob{newJob("")}
	send(t, src.jobs, worker.Job(j), "a job whose ID panics")
	if got := j.outcome(t); got != "back 1s" { // its failure, redelivered after FailureBackoff
		t.Fatalf("job ended %q; want handed back after the failure backoff", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(panics) != 1 || panics[0] != "job ID jobs: id exploded" {
		t.Fatalf("OnPanic got %q", panics)
	}
	waitFor(t, func() bool { return strings.Contains(h.logs.String(), "job=jobs#1") }) // logged after HandBack returned
}

// wedgedEpochs answers its first question, then ignores its context until
// released.
type wedgedEpochs struct {
	calls   atomic.Int32
	release chan struct{}
}

func (e *wedgedEpochs) Newest(_ context.Context, mine uint64) (uint64, error) {
	if e.calls.Add(1) > 1 {
		<-e.release
	}
	return mine, nil
}

// Run waits for an epoch source that ignores its context no longer than
// its exit wait (1s), and names it.
func TestRunDoesNotWaitForAWedgedEpochSource(t *testing.T) {
	src, hd := newSource(), newHandler()
	e := &wedgedEpochs{release: make(chan struct{})}
	t.Cleanup(func() { close(e.release) })
	h := serving(t, worker.Config{Epochs: e, EpochPoll: time.Second}, nil, src, hd)
	h.nextPoll()
	waitFor(t, func() bool { return e.calls.Load() == 2 })
	// 1s a step: the exit wait's timer, once armed.
	returned, err := h.stopAdvancing("test", time.Second)
	if !returned {
		t.Fatal("Run did not return: it waits for the wedged epoch source")
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "the epoch source's Newest still running at exit") {
		t.Fatalf("logs do not name the wedged epoch source:\n%s", logs)
	}
}
