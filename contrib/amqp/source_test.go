package ldamqp_test

import (
	"context"
	"errors"

	"strings"
	"sync"
	"testing"
	"time"

	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Ack returns once the broker has processed it: a job acknowledged and
// then left on a channel that closes is not requeued, while the control,
// a job left unacknowledged on the same channel, is.
func TestAckIsConfirmed(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	f.publish("job-1", "job-2")
	src := f.source(f.dial(), ldamqp.SourceConfig{})
	j1 := fetch(t, src, 10*time.Second)
	if j1.ID() != "job-1" || j1.Delivery() != 1 || j1.LastDelivery() {
		t.Fatalf("got %q, delivery %d, last %v; want job-1 at its first delivery of 6", j1.ID(), j1.Delivery(), j1.LastDelivery())
	}
	if err := j1.Ack(context.Background()); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := j1.Ack(context.Background()); err == nil {
		t.Fatal("a second Ack returned nil")
	}
	j2 := fetch(t, src, 10*time.Second) // held unacknowledged: the control
	if j2.ID() != "job-2" {
		t.Fatalf("got %q; want job-2", j2.ID())
	}
	src.Close() // the channel closes: RabbitMQ requeues what it holds unacknowledged
	// Once the queue has seen its consumer go, it has settled what the
	// channel sent before (a channel's messages reach the queue in order).
	f.await("the consumer's end", func() bool { _, c := f.state(f.q.Name); return c == 0 })
	if n := f.ready(f.q.Name); n != 1 {
		t.Fatalf("%d ready after the channel closed; want 1 (job-2 requeued, job-1 acknowledged for good)", n)
	}
	if err := j2.Ack(context.Background()); err == nil || !strings.Contains(err.Error(), "requeued") {
		t.Fatalf("Ack on a closed channel: %v; want an error saying RabbitMQ requeued the job", err)
	}
	j := fetch(t, f.source(f.dial(), ldamqp.SourceConfig{}), 10*time.Second)
	if j.ID() != "job-2" {
		t.Fatalf("got %q; want job-2 again", j.ID())
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Drain cancels the consumer and hands back every delivery it buffered
// and no Fetch returned, with prefetch 4, round after round at a delivery
// limit of 1: nothing is lost, nothing is dead-lettered, and no drain
// counts a delivery.
func TestDrainHandsBackBufferedJobs(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 1, DeliveryLimit: 1})
	ids := []string{"job-1", "job-2", "job-3", "job-4", "job-5", "job-6"}
	f.publish(ids...)
	conn := f.dial()
	done := map[string]bool{}
	for round, left := 1, len(ids); round <= 3; round, left = round+1, left-1 {
		src := f.source(conn, ldamqp.SourceConfig{Prefetch: 4})
		j := fetch(t, src, 10*time.Second)
		f.awaitReady(f.q.Name, left-4) // 4 delivered: 1 fetched, 3 buffered
		if j.Delivery() != 1 {
			t.Fatalf("round %d: %q at delivery %d; want 1: a drain must count no delivery", round, j.ID(), j.Delivery())
		}
		done[j.ID()] = true
		if err := j.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := src.Drain(testsupport.Context(t, time.Minute)); err != nil {
			t.Fatalf("round %d: Drain: %v", round, err)
		}
		if err := src.Drain(testsupport.Context(t, time.Minute)); err != nil {
			t.Fatalf("round %d: a second Drain: %v", round, err)
		}
		if n := f.ready(f.q.Name); n != left-1 {
			t.Fatalf("round %d: %d ready after the drain; want %d: every buffered job handed back", round, n, left-1)
		}
		f.await("the consumer's cancel", func() bool { _, c := f.state(f.q.Name); return c == 0 })
		if n := f.ready(f.q.DeadLetterQueue); n != 0 {
			t.Fatalf("round %d: %d job(s) dead-lettered by a drain", round, n)
		}
	}
	src := f.source(conn, ldamqp.SourceConfig{})
	for range len(ids) - 3 {
		j := fetch(t, src, 10*time.Second)
		if j.Delivery() != 1 || string(j.Msg().Body) != "body of "+j.ID() || j.Msg().ContentType != "text/plain" || done[j.ID()] {
			t.Fatalf("got %q at delivery %d, body %q, content type %q; want a job not done yet at its first delivery, body and properties intact",
				j.ID(), j.Delivery(), j.Msg().Body, j.Msg().ContentType)
		}
		if c := header(j, ldamqp.HeaderRequeueCause); !strings.Contains(c, "buffered") && !strings.Contains(c, "never fetched") && c != "" {
			t.Fatalf("%q's requeue cause %q", j.ID(), c)
		}
		done[j.ID()] = true
		if err := j.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(done) != len(ids) {
		t.Fatalf("jobs done: %v; want all of %v", done, ids)
	}
	if n := f.ready(f.q.Name); n != 0 {
		t.Fatalf("%d left in the queue", n)
	}
}

// A job handed back for the runner's reason at its last delivery, by a
// real worker interrupted mid-job, is re-published, never dead-lettered,
// and keeps its count; its own failure then dead-letters it.
func TestRunnerHandBackAtTheLastDelivery(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 2, DeliveryLimit: 1})
	f.publish("job-1")
	conn := f.dial()
	first := f.source(conn, ldamqp.SourceConfig{})
	j := fetch(t, first, 10*time.Second)
	if err := ldamqp.HandBackFor(j, context.Background(), 0, nil); err != nil { // a failure: it counts
		t.Fatalf("HandBack: %v", err)
	}
	// The consumer may have buffered job-1 again: Drain hands it back
	// without counting (a close would count it on RabbitMQ 3).
	if err := first.Drain(testsupport.Context(t, time.Minute)); err != nil {
		t.Fatalf("Drain: %v", err)
	}

	src := f.source(conn, ldamqp.SourceConfig{})
	type seen struct {
		delivery int
		last     bool
	}
	started := make(chan seen, 1)
	w, ran := runWorker(t, src, "interrupt", 0, func(ctx context.Context, job worker.Job) error {
		j := job.(*ldamqp.Job)
		started <- seen{j.Delivery(), j.LastDelivery()}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if s := testsupport.Recv(t, started, "the job's start"); s.delivery != 2 || !s.last {
		t.Fatalf("the worker got job-1 at delivery %d, last %v; want its last delivery, 2 of 2", s.delivery, s.last)
	}
	if err := stop(t, w, ran); err != nil {
		t.Fatalf("Run: %v", err)
	}
	f.awaitReady(f.q.Name, 1)
	if n := f.ready(f.q.DeadLetterQueue); n != 0 {
		t.Fatalf("%d dead-lettered; the runner's hand-back must never dead-letter a job", n)
	}

	// The cause is the interrupt's, or the drain's: the worker's Drain,
	// after the loop, may take the copy back in its barrier (a basic.get)
	// and hand it back once more, for its own reason.
	j = fetch(t, f.source(conn, ldamqp.SourceConfig{}), 10*time.Second)
	cause := header(j, ldamqp.HeaderRequeueCause)
	if j.ID() != "job-1" || j.Delivery() != 2 || !j.LastDelivery() ||
		!strings.Contains(cause, "interrupted") && !strings.Contains(cause, "drained") || header(j, ldamqp.HeaderDeliveries) != "1" {
		t.Fatalf("got %q at delivery %d (last %v), headers %v; want job-1 still at delivery 2, its last, with the runner's cause", j.ID(), j.Delivery(), j.LastDelivery(), j.Msg().Headers)
	}
	if err := ldamqp.HandBackFor(j, context.Background(), 0, nil); err != nil { // its own failure, at the last delivery
		t.Fatalf("HandBack: %v", err)
	}
	f.awaitReady(f.q.DeadLetterQueue, 1)
	if n := f.ready(f.q.Name); n != 0 {
		t.Fatalf("%d left in the work queue; want the failed job dead-lettered", n)
	}
}

// The runner's reasons never count, whatever the delay: a job handed back
// for them again and again, at its last delivery, stays deliverable.
func TestRunnerReasonsNeverCount(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 2, DeliveryLimit: 1})
	f.publish("job-1")
	f.wait(50 * time.Millisecond)
	src := f.source(f.dial(), ldamqp.SourceConfig{})
	j := fetch(t, src, 10*time.Second)
	if err := ldamqp.HandBackFor(j, context.Background(), 0, nil); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		delay time.Duration
		cause error
	}{
		{0, worker.ErrNotStarted}, {50 * time.Millisecond, worker.ErrSuperseded}, {0, worker.ErrDrainBound}, {0, worker.ErrInterrupted},
	} {
		j = fetch(t, src, 30*time.Second)
		if j.Delivery() != 2 {
			t.Fatalf("hand-back %d: delivery %d; want 2: the runner's hand-backs count nothing", i, j.Delivery())
		}
		if err := ldamqp.HandBackFor(j, context.Background(), c.delay, c.cause); err != nil {
			t.Fatalf("hand-back %d: %v", i, err)
		}
	}
	j = fetch(t, src, 30*time.Second)
	if j.Delivery() != 2 || !strings.Contains(header(j, ldamqp.HeaderRequeueCause), worker.ErrInterrupted.Error()) {
		t.Fatalf("delivery %d, headers %v; want 2 and the last cause", j.Delivery(), j.Msg().Headers)
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.ready(f.q.DeadLetterQueue); n != 0 {
		t.Fatalf("%d dead-lettered", n)
	}
}

// A job that always fails, in a real worker whose failure backoff delays
// each hand-back through a wait queue, is delivered DeliveryLimit+1 times
// and then dead-lettered: failures count, delayed or not.
func TestFailuresCountToTheDeadLetterQueue(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 3, DeliveryLimit: 1})
	f.wait(100 * time.Millisecond)
	f.publish("job-f")
	var mu sync.Mutex
	var deliveries []int
	w, ran := runWorker(t, f.source(f.dial(), ldamqp.SourceConfig{}), "complete", 100*time.Millisecond, func(_ context.Context, job worker.Job) error {
		mu.Lock()
		deliveries = append(deliveries, job.(*ldamqp.Job).Delivery())
		mu.Unlock()
		return errors.New("always fails")
	})
	f.awaitReady(f.q.DeadLetterQueue, 1)
	if err := stop(t, w, ran); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(deliveries) != 3 || deliveries[0] != 1 || deliveries[1] != 2 || deliveries[2] != 3 {
		t.Fatalf("deliveries %v; want [1 2 3]: MaxDeliveries 3", deliveries)
	}
	if n := f.ready(f.q.Name); n != 0 {
		t.Fatalf("%d left in the work queue", n)
	}
}

// A hand-back with a delay waits in the wait queue for at least the delay,
// then comes back by itself, for the job's failure (counted) and for the
// runner's reason (not counted) alike.
func TestHandBackHonoursTheDelay(t *testing.T) {
	const delay = time.Second
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	wq := f.wait(delay)
	f.publish("job-d")
	src := f.source(f.dial(), ldamqp.SourceConfig{})
	j := fetch(t, src, 10*time.Second)
	for i, cause := range []error{nil, worker.ErrSuperseded} {
		began := time.Now()
		if err := ldamqp.HandBackFor(j, context.Background(), delay, cause); err != nil {
			t.Fatalf("HandBack: %v", err)
		}
		if n, _ := f.state(wq); n != 1 {
			t.Fatalf("hand-back %d: %d in the wait queue %q once HandBack returned; want the job there, confirmed", i, n, wq)
		}
		j = fetch(t, src, time.Minute)
		// RabbitMQ stamps a message's arrival in whole milliseconds: allow
		// for its rounding, never for an early delivery.
		if took := time.Since(began); took < delay-50*time.Millisecond {
			t.Fatalf("hand-back %d: delivered again after %s; want the delay, %s", i, took, delay)
		}
		if j.ID() != "job-d" || j.Delivery() != 2 || header(j, ldamqp.HeaderDeliveries) != "1" {
			t.Fatalf("hand-back %d: got %q at delivery %d, headers %v; want job-d at delivery 2 (one failure)", i, j.ID(), j.Delivery(), j.Msg().Headers)
		}
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A broken connection: the delivery in flight and the buffered ones are
// requeued by RabbitMQ itself; Ack says so; Fetch reports the break, and
// with Redial consumes again once the broker is reachable: every job is
// done, none lost.
func TestBrokenConnection(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	proxy, via := f.proxied()
	f.publish("job-1", "job-2", "job-3")
	conn := dialURL(t, via)
	var redials []*amqp.Connection
	src := f.source(conn, ldamqp.SourceConfig{Prefetch: 2, Redial: func(ctx context.Context) (*amqp.Connection, error) {
		c, err := amqp.DialConfig(via, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			redials = append(redials, c)
		}
		return c, err
	}})
	plainConn := dialURL(t, via)
	plain := f.source(plainConn, ldamqp.SourceConfig{})
	held := fetch(t, src, 10*time.Second)
	if _, err := plain.Fetch(context.Background(), 0); err != nil { // started before the cut
		t.Fatal(err)
	}

	proxy.Cut()
	f.await("the connections' end", func() bool { return conn.IsClosed() && plainConn.IsClosed() })
	if err := held.Ack(context.Background()); err == nil || !strings.Contains(err.Error(), "requeued") {
		t.Fatalf("Ack after the break: %v; want an error saying RabbitMQ requeued the job", err)
	}
	if _, err := plain.Fetch(context.Background(), time.Second); err == nil {
		t.Fatal("Fetch on a broken connection with no Redial returned no error")
	}
	if _, err := plain.Fetch(context.Background(), time.Second); err == nil || !strings.Contains(err.Error(), "Redial") {
		t.Fatalf("Fetch on a closed connection with no Redial: %v; want an error naming SourceConfig.Redial", err)
	}
	if _, err := src.Fetch(context.Background(), time.Second); err == nil { // the consumer's end, or the redial's failure
		t.Fatal("Fetch across the break returned no error")
	}

	proxy.Restore()
	done := map[string]int{}
	deadline := time.Now().Add(time.Minute)
	for len(done) < 3 {
		j, err := src.Fetch(context.Background(), 5*time.Second)
		if err != nil { // a failed cycle, retried as the loop would
			if time.Now().After(deadline) {
				t.Fatalf("still failing a minute after the restore: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if j == nil {
			t.Fatalf("no job within 5s; done %v", done)
		}
		done[j.ID()] = j.(*ldamqp.Job).Delivery()
		if err := j.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.ready(f.q.Name); n != 0 || len(redials) == 0 {
		t.Fatalf("%d left, %d redial(s); want none left after at least one redial", n, len(redials))
	}
	if done["job-1"] < 1 {
		t.Fatalf("deliveries %v", done)
	}
	t.Logf("deliveries after the break: %v (RabbitMQ 3 counts the requeue at a channel's close; 4.3 does not)", done)
}

// Fetch calls worker.Consuming once the consumer is registered: a worker
// whose only fetch waits ten minutes on an empty queue is ready long
// before that fetch returns.
func TestFetchSaysConsuming(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	src := f.source(f.dial(), ldamqp.SourceConfig{})
	lc := testConfig()
	lc.DrainTimeout = 500 * time.Millisecond // the drain waits for the fetch under way until its bound
	w, err := worker.New(worker.Config{Lifecycle: lc})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: 10 * time.Minute,
		Handle: func(context.Context, worker.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	testsupport.Await(t, w.Lifecycle().Events().StartupDone)
	_, c := f.state(f.q.Name)
	if c != 1 {
		t.Fatalf("%d consumer(s) on the queue once the worker is ready; want 1", c)
	}
	// The drain waits for the fetch under way, until its bound; the end
	// of the teardown's hook share (a second later) ends the fetch.
	if err := stop(t, w, ran); err != nil {
		t.Logf("Run: %v", err)
	}
}

// NewSource refuses what a runner cannot use, naming the fix.
func TestNewSourceRefuses(t *testing.T) {
	u := live(t)
	conn := dialURL(t, u.String())
	recovering, err := amqp.DialConfig(u.String(), amqp.Config{Recovery: &amqp.Recovery{}})
	if err != nil {
		t.Fatal(err)
	}
	defer recovering.Close()
	q := ldamqp.Queue{Name: "jobs"}
	for _, c := range []struct {
		name string
		conn *amqp.Connection
		cfg  ldamqp.SourceConfig
		want string
	}{
		{"nil connection", nil, ldamqp.SourceConfig{Queue: q}, "nil"},
		{"no queue", conn, ldamqp.SourceConfig{}, "Queue.Name"},
		{"negative limit", conn, ldamqp.SourceConfig{Queue: ldamqp.Queue{Name: "jobs", DeliveryLimit: -1}}, "Queue.DeliveryLimit=-1"},
		{"negative deliveries", conn, ldamqp.SourceConfig{Queue: ldamqp.Queue{Name: "jobs", MaxDeliveries: -1}}, "Queue.MaxDeliveries=-1"},
		{"long name", conn, ldamqp.SourceConfig{Queue: ldamqp.Queue{Name: strings.Repeat("q", 250)}}, "shorten"},
		{"dead-letter to itself", conn, ldamqp.SourceConfig{Queue: ldamqp.Queue{Name: "jobs", DeadLetterQueue: "jobs"}}, "DeadLetterQueue"},
		{"negative prefetch", conn, ldamqp.SourceConfig{Queue: q, Prefetch: -1}, "Prefetch=-1"},
		{"negative consumer timeout", conn, ldamqp.SourceConfig{Queue: q, ConsumerTimeout: -time.Second}, "ConsumerTimeout=-1s"},
		{"automatic recovery", recovering, ldamqp.SourceConfig{Queue: q}, "Redial"},
	} {
		src, err := ldamqp.NewSource(c.conn, c.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "lameduck: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewSource: %v, %v; want an error naming %q", c.name, src, err, c.want)
		}
	}
}

// DeclareQueue is idempotent, refuses a queue declared with other
// arguments, and WaitQueue rounds delays up to two significant digits.
func TestDeclareQueue(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{DeliveryLimit: 3})
	ch, err := f.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ldamqp.DeclareQueue(ch, f.q); err != nil {
		t.Fatalf("declaring the same queue again: %v", err)
	}
	other := f.q
	other.DeliveryLimit = 4
	if err := ldamqp.DeclareQueue(ch, other); err == nil || !strings.Contains(err.Error(), "x-delivery-limit") {
		t.Fatalf("declaring it with another limit: %v; want RabbitMQ's refusal naming x-delivery-limit", err)
	}
	if err := ldamqp.DeclareQueue(nil, f.q); err == nil {
		t.Fatal("a nil channel passed")
	}
	for _, c := range []struct {
		delay time.Duration
		name  string
		ttl   time.Duration
	}{
		{0, "", 0},
		{-time.Second, "", 0},
		{time.Microsecond, "jobs.lameduck-wait-1ms", time.Millisecond},
		{99 * time.Millisecond, "jobs.lameduck-wait-99ms", 99 * time.Millisecond},
		{time.Second, "jobs.lameduck-wait-1000ms", time.Second},
		{1001 * time.Millisecond, "jobs.lameduck-wait-1100ms", 1100 * time.Millisecond},
		{128 * time.Second, "jobs.lameduck-wait-130000ms", 130 * time.Second},
		{5 * time.Minute, "jobs.lameduck-wait-300000ms", 5 * time.Minute},
	} {
		name, ttl := ldamqp.Queue{Name: "jobs"}.WaitQueue(c.delay)
		if name != c.name || ttl != c.ttl {
			t.Errorf("WaitQueue(%s) = %q, %s; want %q, %s", c.delay, name, ttl, c.name, c.ttl)
		}
	}
}

// A copy keeps the body, the properties and the application's headers,
// and drops what routes it (CC), RabbitMQ's own headers (x-death from a
// wait queue, x-delivery-count) and user-id; a job's ID is its MessageId,
// or SourceConfig.ID's answer.
func TestACopyKeepsTheMessage(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	f.wait(50 * time.Millisecond)
	dc, err := f.ch.PublishWithDeferredConfirm("", f.q.Name, true, false, amqp.Publishing{
		MessageId: "job-c", Body: []byte("payload"), ContentType: "application/json", CorrelationId: "corr", Type: "thumb",
		AppId: "app", UserId: "guest", Priority: 3, Timestamp: time.Unix(1700000000, 0),
		Headers: amqp.Table{"custom": "kept", "CC": []any{"lameduck-test-nowhere"}, "x-delivery-count": int32(7)},
	})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish: %v", err)
	}
	var ids []string
	src := f.source(f.dial(), ldamqp.SourceConfig{ID: func(d *amqp.Delivery) string {
		ids = append(ids, d.MessageId)
		return "id:" + d.MessageId
	}})
	j := fetch(t, src, 10*time.Second)
	if j.ID() != "id:job-c" || j.ID() != "id:job-c" || len(ids) != 1 {
		t.Fatalf("ID %q after %d call(s) of SourceConfig.ID; want id:job-c, asked once", j.ID(), len(ids))
	}
	if j.Delivery() != 1 {
		t.Fatalf("delivery %d; want 1: a publisher's own x-delivery-count is not RabbitMQ's", j.Delivery())
	}
	// Through a wait queue (which adds x-death), then straight back.
	if err := ldamqp.HandBackFor(j, context.Background(), 50*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	j = fetch(t, src, 30*time.Second)
	if _, ok := j.Msg().Headers["x-death"]; !ok {
		t.Fatalf("headers %v; want x-death from the wait queue's dead-lettering", j.Msg().Headers)
	}
	if err := ldamqp.HandBackFor(j, context.Background(), 0, worker.ErrNotStarted); err != nil {
		t.Fatal(err)
	}
	j = fetch(t, src, 10*time.Second)
	m := j.Msg()
	h := m.Headers
	for _, k := range []string{"CC", "x-death", "x-first-death-queue", "x-first-death-reason", "x-delivery-count"} {
		if _, ok := h[k]; ok {
			t.Errorf("the copy kept header %s: %v", k, h)
		}
	}
	if h["custom"] != "kept" || string(m.Body) != "payload" || m.ContentType != "application/json" || m.CorrelationId != "corr" ||
		m.Type != "thumb" || m.AppId != "app" || m.Priority != 3 || !m.Timestamp.Equal(time.Unix(1700000000, 0)) || m.UserId != "" ||
		m.MessageId != "job-c" || header(j, ldamqp.HeaderDeliveries) != "1" || j.Delivery() != 2 {
		t.Fatalf("the copy: %+v; want the message, its properties but user-id, its header custom, one failure counted", m)
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A consumer RabbitMQ cancels (its queue deleted) ends the fetch under
// way with an error; the next fetch tries a new consumer and says the
// queue is missing.
func TestQueueDeletedUnderTheConsumer(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	src := f.source(f.dial(), ldamqp.SourceConfig{})
	if j, err := src.Fetch(context.Background(), 0); j != nil || err != nil {
		t.Fatalf("Fetch of an empty queue: %v, %v", j, err)
	}
	errs := make(chan error, 1)
	go func() {
		_, err := src.Fetch(context.Background(), time.Minute)
		errs <- err
	}()
	if _, err := f.ch.QueueDelete(f.q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := testsupport.Recv(t, errs, "the fetch's end"); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("the fetch under way: %v; want an error saying RabbitMQ cancelled the consumer", err)
	}
	if _, err := src.Fetch(context.Background(), time.Second); err == nil || !strings.Contains(err.Error(), "DeclareQueue") {
		t.Fatalf("the next fetch: %v; want RabbitMQ's 404, naming DeclareQueue", err)
	}
	if err := src.Drain(testsupport.Context(t, time.Minute)); err != nil {
		t.Fatalf("Drain with no consumer: %v", err)
	}
	src.Close()
	if _, err := src.Fetch(context.Background(), time.Second); !errors.Is(err, ldamqp.ErrSourceClosed) {
		t.Fatalf("Fetch after Close: %v; want ErrSourceClosed", err)
	}
}

// Drain is bounded by its context: against a broker that stopped
// answering it returns an error naming what it could not wait for, and
// the job it could not hand back is requeued by RabbitMQ once the
// connection closes.
func TestDrainBoundedByItsContext(t *testing.T) {
	f := newFixture(t, ldamqp.Queue{MaxDeliveries: 6})
	proxy, via := f.proxied()
	f.publish("job-1", "job-2")
	conn := dialURL(t, via)
	src := f.source(conn, ldamqp.SourceConfig{Prefetch: 2})
	j := fetch(t, src, 10*time.Second)
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.awaitReady(f.q.Name, 0) // the other job is in the consumer's buffer
	proxy.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := src.Drain(ctx); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("Drain against a silent broker: %v; want an error saying RabbitMQ did not answer", err)
	}
	proxy.Restore() // closes the stalled connection: RabbitMQ requeues what it held
	f.await("the connection's end", conn.IsClosed)
	f.awaitReady(f.q.Name, 1)
	j = fetch(t, f.source(f.dial(), ldamqp.SourceConfig{}), 10*time.Second)
	if j.ID() != "job-2" {
		t.Fatalf("got %q; want job-2, requeued", j.ID())
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}
