package ldamqp_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Jobs per second through one runner: a worker whose loops share one
// Source take a backlog of b.N jobs published beforehand and acknowledge
// each (a basic.ack and its round trip). The handler does nothing, so this
// is the Source's and the broker's cost per job: with a prefetch of one
// per loop, each loop waits for the quorum queue to commit its ack before
// RabbitMQ sends the next delivery; a prefetch above the loops overlaps
// them (and holds jobs back from other runners). Run with
// go test -bench Runner -run '^$'.
func BenchmarkRunner(b *testing.B) {
	for _, c := range []struct{ loops, prefetch int }{{1, 1}, {1, 4}, {4, 4}} {
		b.Run(fmt.Sprintf("loops=%d/prefetch=%d", c.loops, c.prefetch), func(b *testing.B) { benchRunner(b, c.loops, c.prefetch) })
	}
}

func benchRunner(b *testing.B, loops, prefetch int) {
	u := live(b)
	conn := dialURL(b, u.String())
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := ldamqp.Queue{Name: fmt.Sprintf("lameduck-bench-%d", time.Now().UnixNano())}
	if err := ldamqp.DeclareQueue(ch, q); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(q.Name, false, false, false)
		}
	})
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	dcs := make([]*amqp.DeferredConfirmation, 0, b.N)
	for i := range b.N {
		dc, err := ch.PublishWithDeferredConfirm("", q.Name, false, false,
			amqp.Publishing{MessageId: fmt.Sprint("job-", i), Body: []byte("x"), DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			b.Fatal("the broker refused a job")
		}
	}

	src, err := ldamqp.NewSource(dialURL(b, u.String()), ldamqp.SourceConfig{Queue: q, Prefetch: prefetch, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { src.Close() })
	w, err := worker.New(worker.Config{Lifecycle: testConfig()})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	for i := range loops {
		err := w.AddLoop(worker.Loop{Name: fmt.Sprint("jobs-", i), Source: src, FetchWait: time.Second,
			Handle: func(context.Context, worker.Job) error {
				if done.Add(1) == int64(b.N) {
					close(all)
				}
				return nil
			}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	began := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	<-all
	took := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "jobs/s")
	w.Lifecycle().BeginShutdown("benchmark over")
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
}
