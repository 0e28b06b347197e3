package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// causeJob records the cause HandBack was called with.
type causeJob struct {
	*fakeJob
	cause chan error
}

func (j causeJob) HandBack(ctx context.Context, d time.Duration) error {
	j.cause <- worker.HandBackCause(ctx)
	return j.fakeJob.HandBack(ctx, d)
}

// advanceUntil moves the fake clock a step at a time until cond holds (a
// timer armed after an Advance is then still reached by the next one).
func (h *harness) advanceUntil(step time.Duration, what string, cond func() bool) {
	h.t.Helper()
	for giveUp := time.Now().Add(guard); !cond(); {
		if time.Now().After(giveUp) {
			h.t.Fatalf("never %s", what)
		}
		h.clock.Advance(step)
		time.Sleep(5 * time.Millisecond)
	}
}

// With the pod's grace period known, a runner's drain bound is what the
// grace leaves after the teardown and a margin (18s and 9s of a 30s grace),
// never 8h. At the bound a job whose handler ignores its context is
// cancelled, handed back within the teardown (not left to the queue's ack
// deadline) for the runner's reason, named with its age, and Run returns
// an error wrapping ErrDrainBound so the process exits non-zero, all
// before the grace period ends.
func TestTheDrainBoundFitsTheGraceAndHandsTheJobBack(t *testing.T) {
	src := newSource()
	started, stuck := make(chan context.Context, 1), make(chan struct{})
	h := withLoop(t, worker.Config{}, map[string]string{"LAMEDUCK_ENV": "kubernetes", "LAMEDUCK_TERMINATION_GRACE": "30s"}, src, func(ctx context.Context, _ worker.Job) error {
		started <- ctx
		<-stuck // ignores its context
		return nil
	}, time.Second)
	t.Cleanup(func() { close(stuck) })
	c := h.w.Lifecycle().Config()
	if c.DrainTimeout != 18*time.Second || c.ShutdownTeardown != 9*time.Second {
		t.Fatalf("drain bound %s, teardown %s; want 18s and 9s for a 30s grace", c.DrainTimeout, c.ShutdownTeardown)
	}
	h.boot(src)
	j := causeJob{newJob("job-9"), make(chan error, 1)}
	send(t, src.jobs, worker.Job(j), "job-9")
	ctx := testsupport.Recv(t, started, "the job to start")
	h.clock.Advance(time.Minute) // a minute old at the signal
	signal := h.clock.Now()
	h.shutdown()
	h.advanceUntil(time.Second, "cancelled the job at the drain bound", func() bool { return ctx.Err() != nil })
	if !errors.Is(context.Cause(ctx), worker.ErrDrainBound) {
		t.Fatalf("cause %v; want ErrDrainBound", context.Cause(ctx))
	}
	if took := h.clock.Now().Sub(signal); took < 18*time.Second || took > 19*time.Second {
		t.Fatalf("cancelled %s after the signal; want at the 18s bound", took)
	}
	var got string
	h.advanceUntil(100*time.Millisecond, "handed the job back", func() bool {
		select {
		case got = <-j.ended:
			return true
		default:
			return false
		}
	})
	if got != "back 0s" {
		t.Fatalf("job ended %q; want handed back at once", got)
	}
	if cause := <-j.cause; !errors.Is(cause, worker.ErrDrainBound) {
		t.Fatalf("HandBackCause %v; want ErrDrainBound (the runner's reason, not the job's failure)", cause)
	}
	if back := h.clock.Now().Sub(signal); back > 18*time.Second+9*time.Second {
		t.Fatalf("handed back %s after the signal: past the 27s of drain bound and teardown", back)
	}
	var err error
	h.advanceUntil(100*time.Millisecond, "returned from Run", func() bool {
		select {
		case err = <-h.done:
			h.done <- err
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, worker.ErrDrainBound) {
		t.Fatalf("Run: %v; want an error wrapping ErrDrainBound (a non-zero exit)", err)
	}
	if end := h.clock.Now().Sub(signal); end >= 30*time.Second {
		t.Fatalf("Run returned %s after the signal: not before the 30s grace period's SIGKILL", end)
	}
	logs := h.logs.String()
	for _, want := range []string{
		"drain bound 18s reached: cancelling job job-9 of loop jobs (age 1m18s)",
		"handing the job back while it still runs",
	} {
		if !strings.Contains(logs, want) {
			t.Fatalf("logs lack %q:\n%s", want, logs)
		}
	}
}

// docs/runners.md: "Without LAMEDUCK_TERMINATION_GRACE a runner's teardown
// defaults to 30s in Kubernetes (60s elsewhere), and the log warns that 8h +
// 30s exceeds Kubernetes' default grace period of 30s."
func TestRunnerTeardownWithoutAGrace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		teardown time.Duration
		log      string
	}{
		{"kubernetes", map[string]string{"LAMEDUCK_ENV": "kubernetes"}, 30 * time.Second,
			"runner drain bound 8h0m0s + teardown 30s = 8h0m30s exceeds Kubernetes' default terminationGracePeriodSeconds 30s"},
		{"local", nil, time.Minute, "runner drain bound 8h0m0s + teardown 1m0s = 8h1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, hd := newSource(), newHandler()
			h := serving(t, worker.Config{}, tc.vars, src, hd)
			if got := h.w.Lifecycle().Config().ShutdownTeardown; got != tc.teardown {
				t.Fatalf("teardown %s; want %s", got, tc.teardown)
			}
			if logs := h.logs.String(); !strings.Contains(logs, tc.log) {
				t.Fatalf("the budget line lacks %q:\n%s", tc.log, logs)
			}
		})
	}
}
