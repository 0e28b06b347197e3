package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// claimingSource is a queue claimed between waits (a SQL table polled with
// SKIP LOCKED): while it waits it holds no request the queue could answer,
// so its Fetch ends on worker.Stopping and says which way it ended.
type claimingSource struct {
	fetching chan struct{} // receives one value as each fetch begins to wait
	ended    chan string   // "stopping" or "exit": why a waiting fetch returned
}

func (s *claimingSource) Fetch(ctx context.Context, _ time.Duration) (worker.Job, error) {
	select {
	case <-worker.Stopping(ctx):
		return nil, nil // the drain began: nothing outstanding, and no claim at all
	default:
	}
	s.fetching <- struct{}{}
	select {
	case <-worker.Stopping(ctx):
		s.ended <- "stopping"
	case <-ctx.Done():
		s.ended <- "exit"
	}
	return nil, nil
}

// A fetch waiting with nothing outstanding ends as soon as the runner stops
// asking (worker.Stopping), not when its FetchWait (an hour here) or the
// process's exit ends it: the drain does not wait out an idle fetch.
func TestStoppingEndsAnIdleFetchAtTheDrain(t *testing.T) {
	src := &claimingSource{fetching: make(chan struct{}, 10), ended: make(chan string, 10)}
	h := newHarness(t, worker.Config{}, nil)
	if err := h.w.AddLoop(worker.Loop{Name: "jobs", Source: src, Handle: func(context.Context, worker.Job) error { return nil },
		FetchWait: time.Hour}); err != nil {
		t.Fatal(err)
	}
	h.run()
	testsupport.Recv(t, src.fetching, "the loop to fetch")
	h.w.Lifecycle().BeginShutdown("test")
	if why := testsupport.Recv(t, src.ended, "the idle fetch to end"); why != "stopping" {
		t.Fatalf("the idle fetch ended on %q; want on worker.Stopping, when the drain began", why)
	}
	h.awaitEvent(h.w.Lifecycle().Events().ShutdownInitiated)
	if err := h.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Outside a loop's fetch there is nothing to stop: Stopping is nil, which
// blocks forever in a select.
func TestStoppingIsNilOutsideAFetch(t *testing.T) {
	if c := worker.Stopping(context.Background()); c != nil {
		t.Fatalf("Stopping(context.Background()) = %v; want nil", c)
	}
}
