package ldpgx_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// Jobs per second through one runner: a worker of 1 or 4 loops on one
// Source, b.N jobs enqueued before the clock starts, each handler
// returning nil at once, so each job is a claim, a delete and the loop's
// own bookkeeping. The clock stops when the last job is handled.
func BenchmarkRunner(b *testing.B) {
	for _, loops := range []int{1, 4} {
		b.Run(fmt.Sprintf("loops=%d", loops), func(b *testing.B) {
			d := newDB(b)
			jobs := make([]ldpgx.EnqueueJob, 0, 1000)
			for i := range b.N {
				jobs = append(jobs, ldpgx.EnqueueJob{Key: "job-" + itoa(i)})
				if len(jobs) == cap(jobs) || i == b.N-1 {
					d.enqueue(b, jobs...)
					jobs = jobs[:0]
				}
			}
			src := d.source(b, newPool(b, d.dsnVia(b, "", "")+"&pool_max_conns="+itoa(loops+2)), ldpgx.SourceConfig{})
			w := newWorker(b, worker.Config{}, nil)
			var handled atomic.Int64
			all := make(chan struct{})
			for l := range loops {
				if err := w.AddLoop(worker.Loop{Name: "jobs-" + itoa(l), Source: src, FetchWait: time.Second,
					Handle: func(context.Context, worker.Job) error {
						if handled.Add(1) == int64(b.N) {
							close(all)
						}
						return nil
					}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			wait := run(b, w)
			select {
			case <-all:
			case <-time.After(10 * time.Minute):
				b.Fatalf("%d of %d jobs handled in 10m", handled.Load(), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			w.Lifecycle().BeginShutdown("benchmark over")
			if err := wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// Enqueue's cost to a producer: one job per call, each in a transaction
// of its own (the pool's autocommit), and batches of 100 in one call.
func BenchmarkEnqueue(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			d := newDB(b)
			jobs := make([]ldpgx.EnqueueJob, batch)
			for i := range jobs {
				jobs[i] = ldpgx.EnqueueJob{Key: "job-" + itoa(i), Payload: []byte(`{"n":1}`)}
			}
			ctx := testsupport.Context(b, long)
			b.ResetTimer()
			for range b.N {
				if err := ldpgx.Enqueue(ctx, d.pool, d.table, jobs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
