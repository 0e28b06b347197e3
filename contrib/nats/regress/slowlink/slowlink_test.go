// Regression test, kept from the hostile review's reproduction (shared/breaker/jobs), which
// failed before the Source kept every pull request until the server ended it and stopped copying the
// Nats-* headers into a last-delivery copy; it passes now. The original text follows.
//
// Reproduction: on a link whose round trip exceeds two of the fetch's idle
// heartbeats (⅔ of the fetch wait below 15s), ldnats.Source.Fetch gives up on
// every pull request (nats.go's ErrNoHeartbeat, wrapped as worker.ErrNoReply,
// "silence") while the server is still serving it: the server dispatches a
// job into each abandoned request, counts the delivery, and the client drops
// it. No handler ever runs; every job is redelivered after its ack wait into
// the next abandoned fetch, and at MaxDeliver it is dead-lettered unrun.
// The queue is not "silent": it is being drained into the void.
//
// Contradicts docs/runners.md, "Silent fetches" (a silent loop's "queue
// never moves"; the restart fixes it) and "Hand-backs and delivery limits"
// ("Only a process killed before it could hand back ... leaves its job to
// the ack wait, which counts that delivery too"). The e2e suite runs its
// runners with LAMEDUCK_FETCH_WAIT=200ms, where 133ms of round trip (or of
// a loaded, race-instrumented embedded server's delay) is enough.
//
// Copy to: contrib/nats/brklatency/latency_test.go in a clone (a directory
// of its own: package brklatency_test).
// Run:     cd contrib/nats && go test -count=1 -run TestBrkSlowLinkDropsJobs -v ./brklatency/
//
// On the current code (100ms each way, fetch wait 200ms, MaxDeliver 3) it
// prints (FAIL):
//
//	latency_test.go:NNN: published 40, handled 0, max-deliveries advisories [1 2 3 ... 12], pending 21 ack pending 7 redelivered 19
//	latency_test.go:NNN: 12 job(s) exhausted MaxDeliver 3 without a handler ever running them
//
// (With 40ms each way, below the threshold, all 40 are handled.)
// Fixed: a fetch the client gives up on does not consume jobs (the Source
// keeps reading the pull request until the server ends it, or NAKs what
// arrives late), or the heartbeat allows for the round trip: PASS.
package slowlink_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/contrib/nats/internal/natstest"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/lameduck/lameduck/worker/sourcetest"
	"github.com/nats-io/nats.go/jetstream"
)

func TestBrkSlowLinkDropsJobs(t *testing.T) {
	const oneWay, fetchWait = 100 * time.Millisecond, 200 * time.Millisecond
	s := natstest.JetStream(t)
	ctx := context.Background()
	nc, js := natstest.Connect(t, s.ClientURL())
	natstest.WorkQueue(t, js, jetstream.StreamConfig{Name: "J", Subjects: []string{"j"}, Retention: jetstream.WorkQueuePolicy},
		jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: 3})
	advisories := natstest.WatchMaxDeliveries(t, nc, "J", "w")
	// The runner reaches the server over a slow link.
	relay, err := sourcetest.NewRelay(s.Addr().String(), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	_, rjs := natstest.Connect(t, "nats://"+relay.Addr())
	rcons, err := rjs.Consumer(ctx, "J", "w")
	if err != nil {
		t.Fatal(err)
	}
	src, err := ldnats.NewSource(rjs, rcons, ldnats.SourceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: fetchWait, Handle: func(ctx context.Context, j worker.Job) error {
		handled.Add(1)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	stop, done := testsupport.GoRun(ctx, w.Run)
	time.Sleep(time.Second)
	const n = 40
	for i := 0; i < n; i++ {
		if _, err := js.Publish(ctx, "j", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(170 * time.Millisecond)
	}
	time.Sleep(10 * time.Second)
	stop()
	<-done
	ci, err := rcons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	maxed := advisories.Seqs()
	t.Logf("published %d, handled %d, max-deliveries advisories %v, pending %d ack pending %d redelivered %d",
		n, handled.Load(), maxed, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	if len(maxed) > 0 {
		t.Errorf("%d job(s) exhausted MaxDeliver 3 without a handler ever running them", len(maxed))
	}
}
