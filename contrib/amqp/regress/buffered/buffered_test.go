// Regression test, kept from a hostile review's reproduction, which failed before the fix it names
// below; it passes now. The original text follows.
//
// Reproduction: when a loop's handler ignores its context past the teardown's
// hook share, Worker.joinLoops hands that one job back (giveUp) and returns
// WITHOUT calling Drain on any Source (worker/worker.go: drainSources runs only
// on the <-w.exited branch). ldamqp.Source's deliveries buffered by its prefetch
// are handed back only by Drain (worker/source.go: "A Source that buffers ...
// hands back every buffered job it has not returned when its Drain is
// called"). So they stay unacknowledged until the connection closes, and
// RabbitMQ 3 requeues them itself, counting x-delivery-count: jobs that never
// started are charged a delivery against Queue.MaxDeliveries (Job.Delivery
// includes x-delivery-count) and against x-delivery-limit. Here a job that had
// failed once (lameduck-deliveries 1, MaxDeliveries 3) comes back at its LAST
// delivery after running only once: its next failure dead-letters it after 2
// runs instead of 3, through no fault of its own. Nothing is logged about it.
//
// Copy to: contrib/amqp/zz_hostile_buffered/buffered_test.go in a clone
// (package zzhostilebuffered_test). Needs RabbitMQ 3 at 127.0.0.1:5672
// (guest/guest); this machine runs 3.10.8.
// Run:     cd contrib/amqp && go test -count=1 -run TestHostileBufferedNotDrained -v ./zz_hostile_buffered/
//
// On the current code it prints (FAIL):
//
//	buffered_test.go:NNN: Run returned lameduck: teardown hook "consume loops": context deadline exceeded
//	buffered_test.go:NNN: "j2" never started, yet came back with x-delivery-count 1: Delivery() 3 of MaxDeliveries 3, LastDelivery true (it has run 1 time)
//
// Fixed: the buffered deliveries are handed back (Drain still runs, or the
// Source's buffer is handed back at the hook share's end) as copies that
// count nothing: "j2" comes back with Delivery() 2: PASS.
package buffered_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestHostileBufferedNotDrained(t *testing.T) {
	url := "amqp://guest:guest@127.0.0.1:5672/"
	ctx := context.Background()
	admin, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ach, _ := admin.Channel()
	q := ldamqp.Queue{Name: fmt.Sprintf("hostile-buffered-%d-%d", os.Getpid(), time.Now().UnixNano()), MaxDeliveries: 3}
	if err := ldamqp.DeclareQueue(ach, q); err != nil {
		t.Fatal(err)
	}
	defer ach.QueueDelete(q.Name, false, false, false)
	pub := func(id string, prior int) {
		h := amqp.Table{}
		if prior > 0 {
			h[ldamqp.HeaderDeliveries] = int64(prior)
		}
		if err := ach.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{MessageId: id, Headers: h, Body: []byte(id), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	pub("stuck", 0)
	pub("j2", 1) // failed once before: this is its 2nd delivery of 3
	time.Sleep(200 * time.Millisecond)

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := ldamqp.NewSource(conn, ldamqp.SourceConfig{Queue: q, Prefetch: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0", Logger: quiet,
		DrainMode: "interrupt", DrainTimeout: time.Second, ShutdownTeardown: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	runs := map[string]int{}
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: 200 * time.Millisecond,
		Handle: func(ctx context.Context, j worker.Job) error {
			id := j.(*ldamqp.Job).Msg().MessageId
			runs[id]++
			if id == "stuck" {
				close(started)
				<-release // ignores ctx
			}
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	stop, done := testsupport.GoRun(ctx, w.Run)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("stuck never started")
	}
	time.Sleep(300 * time.Millisecond) // j2 sits in the prefetch buffer
	stop()
	runErr := <-done
	t.Logf("Run returned %v", runErr)
	close(release)
	src.Close()
	conn.Close() // the application's closer: RabbitMQ takes back what the channel held

	// Read j2 as the next runner would.
	conn2, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	src2, _ := ldamqp.NewSource(conn2, ldamqp.SourceConfig{Queue: q, Prefetch: 5, Logger: quiet})
	defer src2.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		jb, err := src2.Fetch(ctx, 500*time.Millisecond)
		if err != nil || jb == nil {
			continue
		}
		j := jb.(*ldamqp.Job)
		_ = j.Ack(ctx)
		if j.Msg().MessageId != "j2" {
			continue
		}
		xdc := j.Msg().Headers["x-delivery-count"]
		if j.Delivery() != 2 {
			t.Fatalf("%q never started, yet came back with x-delivery-count %v: Delivery() %d of MaxDeliveries %d, LastDelivery %v (it has run %d time)",
				"j2", xdc, j.Delivery(), q.MaxDeliveries, j.LastDelivery(), 1+runs["j2"])
		}
		t.Logf("j2 came back with Delivery() %d (x-delivery-count %v)", j.Delivery(), xdc)
		return
	}
	t.Fatal("j2 did not come back within 5s: lost")
}
