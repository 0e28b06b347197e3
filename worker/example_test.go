package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/worker"
)

// memQueue is a Source over a channel, for the example.
type memQueue chan worker.Job

func (q memQueue) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case j := <-q:
		return j, nil
	case <-t.C: // nothing within the fetch wait: an idle cycle
		return nil, nil
	case <-ctx.Done(): // the process is exiting (the drain never cancels a fetch: it waits for it)
		return nil, nil
	}
}

type memJob string

func (j memJob) ID() string                                    { return string(j) }
func (j memJob) Ack(context.Context) error                     { return nil }
func (j memJob) HandBack(context.Context, time.Duration) error { return nil }

// A runner with one consume loop. Its probes answer on their own listener
// (LAMEDUCK_PROBE_ADDR, ":9090" by default); SIGTERM drains it.
func Example() {
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProbeAddr:     "127.0.0.1:0",
		IgnoreSignals: true, // a real runner listens for SIGTERM
	}})
	if err != nil {
		panic(err) // names the setting, its value and the fix
	}
	q := make(memQueue, 3)
	q <- memJob("job-1")
	q <- memJob("job-2")
	q <- memJob("job-3")
	done := 0
	err = w.AddLoop(worker.Loop{
		Name:      "jobs",
		Source:    q,
		FetchWait: 10 * time.Millisecond,
		Handle: func(ctx context.Context, job worker.Job) error {
			fmt.Println("done", job.ID()) // ctx ends at the drain bound, or at the signal in interrupt mode
			if done++; done == 3 {
				w.Lifecycle().BeginShutdown("example over") // as SIGTERM would
			}
			return nil // acknowledged; an error hands the job back
		},
	})
	if err != nil {
		panic(err)
	}
	if err := w.Run(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("stopped")
	// Output:
	// done job-1
	// done job-2
	// done job-3
	// stopped
}
