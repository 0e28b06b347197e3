package ldnats_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/contrib/nats/internal/natstest"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// benchQueue publishes n jobs to a fresh queue on an embedded server.
func benchQueue(b *testing.B, n int) *queue {
	b.Helper()
	e := startEmbedded(b, true)
	nc, js := natstest.Connect(b, e.url())
	st, cons := natstest.WorkQueue(b, js, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy},
		jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1})
	var futs []jetstream.PubAckFuture
	for i := range n {
		f, err := js.PublishAsync(subject, []byte(fmt.Sprint(i)))
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	return &queue{nc: nc, js: js, st: st, cons: cons}
}

// benchRunner is a worker with loops loops on q, whose handler counts each
// job and calls onJob.
func benchRunner(b *testing.B, q *queue, loops int, onJob func(n int64)) *worker.Worker {
	b.Helper()
	w, err := worker.New(worker.Config{FetchWait: 250 * time.Millisecond, Lifecycle: lameduck.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ProbeAddr: "127.0.0.1:0", IgnoreSignals: true,
		ShutdownTeardown: 5 * time.Second,
	}})
	if err != nil {
		b.Fatal(err)
	}
	src, err := ldnats.NewSource(q.js, q.cons, ldnats.SourceConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	for i := range loops {
		if err := w.AddLoop(worker.Loop{Name: fmt.Sprintf("jobs-%d", i), Source: src, Handle: func(context.Context, worker.Job) error {
			onJob(done.Add(1))
			return nil
		}}); err != nil {
			b.Fatal(err)
		}
	}
	return w
}

// BenchmarkRunnerJobs measures jobs per second through one runner on an
// embedded JetStream server: each job fetched (a pull request of batch 1),
// handled (it does nothing) and acknowledged with the server's
// confirmation. ns/op is the time per job.
func BenchmarkRunnerJobs(b *testing.B) {
	for _, loops := range []int{1, 4} {
		b.Run(fmt.Sprintf("loops=%d", loops), func(b *testing.B) {
			q := benchQueue(b, b.N)
			all := make(chan struct{})
			n := int64(b.N)
			w := benchRunner(b, q, loops, func(done int64) {
				if done == n {
					close(all)
				}
			})
			b.ResetTimer()
			ran := make(chan error, 1)
			go func() { ran <- w.Run(context.Background()) }()
			<-all
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			w.Lifecycle().BeginShutdown("benchmark over")
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkDrainToExit measures how long a runner of 4 loops busy on a
// backlog of 2,000 jobs takes from the drain's start to Run's return: the
// fetches under way answered (and their jobs handed back), the jobs in
// flight finished (each 5ms), the Source drained.
func BenchmarkDrainToExit(b *testing.B) {
	for range b.N {
		b.StopTimer()
		q := benchQueue(b, 2000)
		started := make(chan struct{})
		w := benchRunner(b, q, 4, func(done int64) {
			time.Sleep(5 * time.Millisecond)
			if done == 100 {
				close(started)
			}
		})
		ran := make(chan error, 1)
		go func() { ran <- w.Run(context.Background()) }()
		<-started
		b.StartTimer()
		w.Lifecycle().BeginShutdown("benchmark")
		err := <-ran
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
	}
}
