package ldnats_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// queue is a work-queue stream with one durable pull consumer, on a
// JetStream server of the test's own.
type queue struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	st   jetstream.Stream
	cons jetstream.Consumer
}

const subject = "jobs.test"

// newQueue starts a JetStream server of the test's own and opens a queue
// on it.
func newQueue(t *testing.T, cc jetstream.ConsumerConfig) (*queue, *embedded) {
	t.Helper()
	e := startEmbedded(t, true)
	return openQueue(t, e.url(), cc), e
}

// openQueue connects to url and creates the stream and a consumer of
// config cc.
func openQueue(t *testing.T, url string, cc jetstream.ConsumerConfig) *queue {
	t.Helper()
	ctx := testsupport.Context(t, time.Minute)
	q := &queue{nc: connect(t, url)}
	var err error
	if q.js, err = jetstream.New(q.nc); err != nil {
		t.Fatal(err)
	}
	if q.st, err = q.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{subject},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cc.Durable = "worker" // AckPolicy's zero value is AckExplicitPolicy
	if q.cons, err = q.st.CreateOrUpdateConsumer(ctx, cc); err != nil {
		t.Fatal(err)
	}
	return q
}

func (q *queue) source(t *testing.T, cfg ldnats.SourceConfig) *ldnats.Source {
	t.Helper()
	src, err := ldnats.NewSource(q.js, q.cons, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (q *queue) publish(t *testing.T, data, msgID string) {
	t.Helper()
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := q.js.Publish(testsupport.Context(t, 10*time.Second), subject, []byte(data), opts...); err != nil {
		t.Fatal(err)
	}
}

// fetch fetches one job, failing the test on an error or nothing.
func fetch(t *testing.T, src *ldnats.Source, wait time.Duration) *ldnats.Job {
	t.Helper()
	j, err := src.Fetch(testsupport.Context(t, time.Minute), wait)
	if err != nil || j == nil {
		t.Fatalf("Fetch(%s) = %v, %v; want a job", wait, j, err)
	}
	return j.(*ldnats.Job)
}

// fetchNone asserts that a fetch of wait is an idle cycle.
func fetchNone(t *testing.T, src *ldnats.Source, wait time.Duration, why string) {
	t.Helper()
	j, err := src.Fetch(testsupport.Context(t, time.Minute), wait)
	if err != nil || j != nil {
		t.Fatalf("Fetch(%s) = %v, %v; want an idle cycle (nil, nil): %s", wait, j, err, why)
	}
}

func delivered(t *testing.T, j *ldnats.Job) *jetstream.MsgMetadata {
	t.Helper()
	md, err := j.Msg().Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// A job's failure handed back with a delay is a NAK with that delay: the
// same message comes back, its second delivery, no sooner than the delay;
// an acknowledged job does not.
func TestHandBackRedeliversAfterTheDelay(t *testing.T) {
	q, _ := newQueue(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second})
	src := q.source(t, ldnats.SourceConfig{})
	q.publish(t, `{"n":1}`, "job-1")
	j := fetch(t, src, time.Second)
	if j.ID() != "job-1" || string(j.Msg().Data()) != `{"n":1}` || j.LastDelivery() {
		t.Fatalf("job %q %q, last delivery %v; want job-1, its data, not its last delivery", j.ID(), j.Msg().Data(), j.LastDelivery())
	}
	const delay = 2 * time.Second
	handedBack := time.Now()
	if err := j.HandBack(testsupport.Context(t, time.Minute), delay); err != nil {
		t.Fatal(err)
	}
	again := fetch(t, src, 10*time.Second)
	if took := time.Since(handedBack); took < delay {
		t.Fatalf("redelivered %s after the hand-back; want no sooner than its %s delay", took, delay)
	}
	if md := delivered(t, again); again.ID() != "job-1" || md.NumDelivered != 2 || md.Sequence.Stream != 1 {
		t.Fatalf("redelivered %q, delivery %d, sequence %d; want job-1's second delivery of sequence 1", again.ID(), md.NumDelivered, md.Sequence.Stream)
	}
	if err := again.Ack(testsupport.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	fetchNone(t, src, 500*time.Millisecond, "the job was acknowledged")
	if info, err := q.st.Info(testsupport.Context(t, time.Minute)); err != nil || info.State.Msgs != 0 {
		t.Fatalf("stream info %v, %v; want no message left after the ack", info, err)
	}
}

// A job's ID is SourceConfig.ID's answer, the Nats-Msg-Id header by
// default, "seq-<sequence>" when that is empty.
func TestJobID(t *testing.T) {
	q, _ := newQueue(t, jetstream.ConsumerConfig{})
	q.publish(t, "a", "")
	q.publish(t, "b", "job-b")
	q.publish(t, "c", "job-c")
	src := q.source(t, ldnats.SourceConfig{})
	byData := q.source(t, ldnats.SourceConfig{ID: func(m jetstream.Msg) string {
		if string(m.Data()) == "c" {
			return "custom-c"
		}
		return ""
	}})
	for _, c := range []struct {
		src  *ldnats.Source
		want string
	}{{src, "seq-1"}, {src, "job-b"}, {byData, "custom-c"}} {
		j := fetch(t, c.src, time.Second)
		if j.ID() != c.want {
			t.Errorf("ID %q; want %q", j.ID(), c.want)
		}
		if err := j.Ack(testsupport.Context(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

// A job that runs three times its consumer's AckWait is not redelivered:
// the Source keeps it in progress. An idle fetch of the same consumer
// meanwhile gets nothing; without the in-progress acks the server would
// hand it the job after 3s.
func TestSourceKeepsALongJobInProgress(t *testing.T) {
	q, _ := newQueue(t, jetstream.ConsumerConfig{AckWait: 3 * time.Second})
	src := q.source(t, ldnats.SourceConfig{})
	if src.InProgressEvery() != time.Second {
		t.Fatalf("InProgressEvery = %s; want a third of the 3s AckWait", src.InProgressEvery())
	}
	q.publish(t, "long", "job-long")
	j := fetch(t, src, time.Second)
	fetchNone(t, src, 9*time.Second, "the job in flight was redelivered: its in-progress acks did not keep it")
	if err := j.Ack(testsupport.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if info, err := q.cons.Info(testsupport.Context(t, time.Minute)); err != nil || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("consumer info %+v, %v; want nothing pending and nothing redelivered", info, err)
	}
}

// A fetch that ends on the server's expiry of the request is an idle
// cycle; once the server stops answering (a proxy that keeps the
// connection open and drops every byte), a fetch ends in silence after its
// wait and the allowance: an error wrapping worker.ErrNoReply.
func TestFetchTellsExpiryFromSilence(t *testing.T) {
	e := startEmbedded(t, true)
	proxy := testsupport.NewProxy(t, e.addr())
	q := openQueue(t, "nats://"+proxy.Addr(), jetstream.ConsumerConfig{})
	src := q.source(t, ldnats.SourceConfig{})
	for range 3 {
		fetchNone(t, src, 600*time.Millisecond, "an idle queue on a server that answers")
	}
	proxy.Stall()
	_, err := src.Fetch(testsupport.Context(t, time.Minute), 600*time.Millisecond)
	if !errors.Is(err, worker.ErrNoReply) || !strings.Contains(err.Error(), "did not answer a pull request of 600ms within "+ldnats.Allowance(600*time.Millisecond).String()+" more") {
		t.Fatalf("Fetch from a silent server: %v; want worker.ErrNoReply naming the wait and the allowance", err)
	}
}

// Every way a runner hands a job back (the interrupt drain, the drain
// bound, a superseded epoch) leaves the job deliverable: NAKed before its
// last delivery, re-published at it (headers naming the original and the
// cause, the original acknowledged), with no max-deliveries advisory; a
// job's own failure at its last delivery is NAKed, counts, and reaches the
// dead-letter path (TestJobFailureCountsAtTheLastDelivery).
func TestHandBacksAndTheDeliveryLimit(t *testing.T) {
	for _, way := range []struct {
		name, cause string
		give        func(t *testing.T, q *queue, src *ldnats.Source)
	}{
		{"interrupt drain", "interrupted", interruptOne},
		{"drain bound", "drain bound", boundOne},
		{"superseded epoch", "superseded", supersedeOne},
	} {
		for _, c := range []struct {
			name       string
			maxDeliver int
			requeued   bool
		}{{"before the last delivery", 2, false}, {"at the last delivery", 1, true}} {
			t.Run(way.name+", "+c.name, func(t *testing.T) {
				q, _ := newQueue(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: c.maxDeliver})
				advisories, err := q.nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>")
				if err != nil {
					t.Fatal(err)
				}
				way.give(t, q, q.source(t, ldnats.SourceConfig{}))

				j := fetch(t, q.source(t, ldnats.SourceConfig{}), 10*time.Second)
				md := delivered(t, j)
				h := j.Msg().Headers()
				switch {
				case !c.requeued && (md.Sequence.Stream != 1 || md.NumDelivered != 2 || j.ID() != "job-1"):
					t.Fatalf("got %q, sequence %d, delivery %d; want job-1 NAKed: sequence 1, delivery 2", j.ID(), md.Sequence.Stream, md.NumDelivered)
				case c.requeued && (md.Sequence.Stream != 2 || md.NumDelivered != 1 || j.ID() != "job-1.requeued-from-1" ||
					h.Get(ldnats.HeaderRequeuedFrom) != "1" || !strings.Contains(h.Get(ldnats.HeaderRequeueCause), way.cause) ||
					string(j.Msg().Data()) != "work"):
					t.Fatalf("got %q, sequence %d, delivery %d, headers %v, data %q; want a copy of sequence 1 at its first delivery, naming the original and the cause %q",
						j.ID(), md.Sequence.Stream, md.NumDelivered, h, j.Msg().Data(), way.cause)
				}
				if err := j.Ack(testsupport.Context(t, time.Minute)); err != nil {
					t.Fatal(err)
				}
				if m, err := advisories.NextMsg(500 * time.Millisecond); err == nil {
					t.Fatalf("a max-deliveries advisory was published: %s", m.Data)
				}
			})
		}
	}
}

// interruptOne publishes job-1 and runs a worker on src until the job has
// started, then drains it: the drain (mode interrupt) cancels the job and
// the loop hands it back, with the runner's reason.
func interruptOne(t *testing.T, q *queue, src *ldnats.Source) {
	t.Helper()
	t.Setenv("LAMEDUCK_DRAIN_MODE", "interrupt")
	q.publish(t, "work", "job-1")
	if err := drainOne(t, src, worker.Config{}); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// boundOne is interruptOne with the drain in mode complete bounded to
// 300ms: the job, which ends only when cancelled, is cancelled at the
// bound and handed back, and Run fails saying so.
func boundOne(t *testing.T, q *queue, src *ldnats.Source) {
	t.Helper()
	t.Setenv("LAMEDUCK_DRAIN_MODE", "complete")
	t.Setenv("LAMEDUCK_DRAIN_TIMEOUT", "300ms")
	q.publish(t, "work", "job-1")
	if err := drainOne(t, src, worker.Config{}); err == nil {
		t.Fatal("Run returned nil; want the error of a drain that reached its bound with a job in flight")
	}
}

// drainOne runs a worker of cfg on src until its job has started, then
// drains it and returns Run's error. The job ends only when its context
// does.
func drainOne(t *testing.T, src *ldnats.Source, cfg worker.Config) error {
	t.Helper()
	cfg.Lifecycle = lameduck.Config{
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProbeAddr:     "127.0.0.1:0",
		IgnoreSignals: true,
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: 500 * time.Millisecond,
		Handle: func(ctx context.Context, _ worker.Job) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		}}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	testsupport.Recv(t, started, "the job's start")
	w.Lifecycle().BeginShutdown("test")
	return testsupport.Recv(t, ran, "Run's return")
}

// newestEpoch is an EpochSource whose newest epoch the test sets.
type newestEpoch struct{ n atomic.Uint64 }

func (e *newestEpoch) Newest(_ context.Context, mine uint64) (uint64, error) {
	return max(e.n.Load(), mine), nil
}

// supersedeOne runs an epoch-1 worker on src whose fetch is under way at
// the server (a pending pull request), makes epoch 2 the newest, and once
// the worker says it is superseded publishes job-1: the fetch under way
// delivers it, and the superseded runner hands it back unstarted.
func supersedeOne(t *testing.T, q *queue, src *ldnats.Source) {
	t.Helper()
	logs := new(testsupport.LogBuffer)
	epochs := new(newestEpoch)
	epochs.n.Store(1)
	w, err := worker.New(worker.Config{
		Lifecycle: lameduck.Config{
			Logger:        slog.New(slog.NewTextHandler(logs, nil)),
			ProbeAddr:     "127.0.0.1:0",
			IgnoreSignals: true,
		},
		Epoch: 1, Epochs: epochs, EpochPoll: 50 * time.Millisecond, EpochMismatchDelay: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := atomic.Bool{}
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Minute, // one fetch spans the test
		Handle: func(context.Context, worker.Job) error { ran.Store(true); return nil }}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	ctx := testsupport.Context(t, time.Minute)
	waitLog := func(what, text string) {
		t.Helper()
		for !strings.Contains(logs.String(), text) {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: the worker did not log %q; its log:\n%s", what, text, logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for { // the loop's fetch is at the server
		info, err := q.cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	epochs.n.Store(2)
	waitLog("the supersession", "lameduck: worker: superseded")
	q.publish(t, "work", "job-1")
	waitLog("the hand-back", "lameduck: worker: job handed back")
	w.Lifecycle().BeginShutdown("test")
	if err := testsupport.Recv(t, done, "Run's return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ran.Load() {
		t.Fatal("the superseded runner ran the job")
	}
}

// A job's own failure (a hand-back with no runner's cause) is a plain NAK
// even at its last delivery: it counts against MaxDeliver, the server
// publishes its max-deliveries advisory (the dead-letter hook) and
// delivers it no more, and the stream keeps it for the dead-letter policy.
func TestJobFailureCountsAtTheLastDelivery(t *testing.T) {
	q, _ := newQueue(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 1})
	advisories, err := q.nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>")
	if err != nil {
		t.Fatal(err)
	}
	q.publish(t, "fails", "job-f")
	src := q.source(t, ldnats.SourceConfig{})
	j := fetch(t, src, 2*time.Second)
	if !j.LastDelivery() {
		t.Fatal("LastDelivery = false at delivery 1 of MaxDeliver 1")
	}
	if err := j.HandBack(testsupport.Context(t, time.Minute), 0); err != nil {
		t.Fatalf("HandBack: %v", err)
	}
	fetchNone(t, src, time.Second, "the failed job's last delivery was used: it must not be re-published")
	if _, err := advisories.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no max-deliveries advisory after the failed job's last delivery: %v", err)
	}
	if info, err := q.st.Info(testsupport.Context(t, time.Minute)); err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream info %v, %v; want the failed job kept for the dead-letter policy", info, err)
	}
}

// NewSource refuses what a runner cannot use, naming the fix.
func TestNewSourceRefuses(t *testing.T) {
	q, _ := newQueue(t, jetstream.ConsumerConfig{})
	ctx := testsupport.Context(t, time.Minute)
	st, err := q.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events"}}) // a work queue requires explicit acks
	if err != nil {
		t.Fatal(err)
	}
	noAcks, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "reader", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ldnats.NewSource(q.js, noAcks, ldnats.SourceConfig{}); err == nil ||
		!strings.Contains(err.Error(), "AckPolicy AckNone") || !strings.Contains(err.Error(), "AckExplicitPolicy") {
		t.Fatalf("a consumer without acks: %v; want an error naming its AckPolicy and the fix", err)
	}
	if _, err := ldnats.NewSource(nil, q.cons, ldnats.SourceConfig{}); err == nil {
		t.Fatal("a nil JetStream was accepted")
	}
	if _, err := ldnats.NewSource(q.js, nil, ldnats.SourceConfig{}); err == nil {
		t.Fatal("a nil consumer was accepted")
	}
}
