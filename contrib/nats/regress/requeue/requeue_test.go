// Regression test, kept from the hostile review's reproduction (shared/breaker/jobs), which
// failed before the Source kept every pull request until the server ended it and stopped copying the
// Nats-* headers into a last-delivery copy; it passes now. The original text follows.
//
// Reproduction: ldnats.Job.HandBack at a job's last delivery (the runner's
// own hand-back: drain, interrupt, superseded, drain bound) re-publishes a
// copy of the message to its stored subject with *every* header of the
// original, then acks the original. Three ordinary JetStream setups make that
// copy fail or do harm; when it fails, HandBack returns the error, the
// original is neither acked nor NAKed, and at its last delivery the server
// never delivers it again: the job is lost, while the worker logs "handing
// job back failed; the queue redelivers it when its ack wait expires" (it
// does not: MaxDeliver is reached). docs/runners.md: "the runner's own
// hand-backs never strand a job"; ldnats.Job.HandBack: "a NAK would strand a
// job that never failed, so a copy is published".
//
//  1. TestBrkRequeueWithExpectedHeadersStrandsTheJob: the publisher's
//     optimistic-concurrency headers (Nats-Expected-Last-Subject-Sequence,
//     -Last-Sequence, -Last-Msg-Id), stored with the message, are checked
//     again on the copy against a stream that has moved on (the original is
//     still in it): "wrong last sequence". Pattern: one pending job per
//     entity, published with jetstream.WithExpectLastSequencePerSubject(0).
//  2. TestBrkRequeueRollupPurgesTheNewerJob: the copy carries Nats-Rollup:
//     sub, so on a "latest job per entity wins" stream (AllowRollup) it
//     purges the newer job published meanwhile: the newer job is lost, the
//     stale one runs again.
//  3. TestBrkRequeueOnATransformedSubjectStrandsTheJob: on a stream with a
//     SubjectTransform (published on in.>, stored as work.>) the copy goes to
//     the stored subject, which no stream captures: "no response from stream".
//
// Copy to: contrib/nats/brkrequeuehdr/requeue_headers_test.go in a clone
// (a directory of its own, package brkrequeuehdr_test).
// Run:     cd contrib/nats && go test -count=1 -run TestBrk -v ./brkrequeuehdr/
//
// On the current code all three FAIL, printing:
//
//	the interrupted job was lost: HandBack at its last delivery failed (lameduck: nats: last delivery (1 of
//	  MaxDeliver 1): publishing a copy: nats: nats: API error: code=400 err_code=10071 description=wrong last
//	  sequence: 1), the max-deliveries advisory fired for stream sequence(s) [1] and no copy is in the stream
//	  (num_pending 0); the worker logged: ... "lameduck: worker: handing job back failed; the queue redelivers
//	  it when its ack wait expires: ..."
//	the newer job "v2" was purged by the hand-back's copy of "v1": the stream now holds [v1] (want v2 kept)
//	the interrupted job was lost on a stream with a subject transform: HandBack failed (... publishing a
//	  copy: nats: no response from stream), max-deliveries advisory for [1], num_pending 0
//
// Fixed: the copy drops the Nats-Expected-* and Nats-Rollup headers (the
// server itself drops Nats-Expected-* from mirrored and sourced messages) and
// reaches the stream (its original subject, or a direct path), or, when it
// cannot, the job is not left to a redelivery that will never come; all
// three PASS.
package requeue_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/contrib/nats/internal/natstest"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// interruptHeldJob runs a worker (drain mode interrupt, logging to logger)
// whose one loop takes a job from src and holds it until the drain
// interrupts it; between runs while the job is held. Then the worker is
// stopped, as a rollout's SIGTERM does: the job is handed back
// (worker.ErrInterrupted), and Run must return nil.
func interruptHeldJob(t *testing.T, src worker.Source, logger *slog.Logger, between func()) {
	t.Helper()
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0", DrainMode: worker.DrainInterrupt,
		Logger: logger}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Second,
		Handle: func(ctx context.Context, j worker.Job) error {
			once.Do(func() { close(started) })
			<-ctx.Done() // a long job: interrupted by the drain, checkpointed
			return context.Cause(ctx)
		}}); err != nil {
		t.Fatal(err)
	}
	stop, done := testsupport.GoRun(context.Background(), w.Run)
	<-started
	between()
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestBrkRequeueWithExpectedHeadersStrandsTheJob(t *testing.T) {
	log := &testsupport.LogBuffer{}
	// One pending job per entity: published only if none is pending for it.
	handBackErr, lost, pending := lastDeliveryHandBack(t, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"},
		Retention: jetstream.WorkQueuePolicy}, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.Publish(ctx, "jobs.entity-42", []byte("recompute 42"), jetstream.WithExpectLastSequencePerSubject(0))
		return err
	}, slog.New(slog.NewTextHandler(log, nil)))
	if pending == 0 || len(lost) > 0 {
		line := ""
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "hand") {
				line = l
			}
		}
		t.Fatalf("the interrupted job was lost: HandBack at its last delivery failed (%v), the max-deliveries advisory fired for stream sequence(s) %v and no copy is in the stream (num_pending %d); the worker logged: %s",
			handBackErr, lost, pending, line)
	}
}

// lastDeliveryHandBack makes the stream sc with the work queue's consumer
// "w" (AckWait 1s, MaxDeliver 1: the first delivery is the last), publishes
// one job with publish, and runs it through interruptHeldJob with a Source
// logging nothing and a worker logging to logger: a rollout (SIGTERM, drain
// mode interrupt) hands the job back at its last delivery. Past the ack
// wait it returns what HandBack returned, the stream sequences of the
// max-deliveries advisories (a job lost), and the consumer's pending count
// (a copy re-published).
func lastDeliveryHandBack(t *testing.T, sc jetstream.StreamConfig, publish func(context.Context, jetstream.JetStream) error,
	logger *slog.Logger) (handBackErr error, lost []uint64, pending uint64) {
	t.Helper()
	s := natstest.JetStream(t)
	nc, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	_, cons := natstest.WorkQueue(t, js, sc, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Second, MaxDeliver: 1})
	maxed := natstest.WatchMaxDeliveries(t, nc, sc.Name, "w")
	if err := publish(ctx, js); err != nil {
		t.Fatal(err)
	}
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	interruptHeldJob(t, hbSource{src, &handBackErr}, logger, func() {})
	time.Sleep(2500 * time.Millisecond) // past the 1s ack wait
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return handBackErr, maxed.Seqs(), ci.NumPending
}

// The same copy carries the original's Nats-Rollup header: on a "latest job
// per entity wins" stream (AllowRollup, each job published with Nats-Rollup:
// sub), the runner's hand-back of an old job at its last delivery re-publishes
// it as a rollup, which purges the newer job published meanwhile: the newer
// job is lost, the stale one runs again.
//
// On the current code it prints (FAIL):
//
//	requeue_headers_test.go:NNN: the newer job "v2" was purged by the hand-back's copy of "v1": the stream now
//	  holds [v1] (want v2 kept)
func TestBrkRequeueRollupPurgesTheNewerJob(t *testing.T) {
	s := natstest.JetStream(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	st, cons := natstest.WorkQueue(t, js, jetstream.StreamConfig{Name: "LATEST", Subjects: []string{"latest.>"},
		Retention: jetstream.WorkQueuePolicy, AllowRollup: true}, jetstream.ConsumerConfig{Durable: "w",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 1})
	pub := func(data string) {
		m := nats.NewMsg("latest.entity-42")
		m.Data = []byte(data)
		m.Header.Set("Nats-Rollup", "sub")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	pub("v1")
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The newer job for the entity is published while v1 runs; then the drain interrupts v1 at its last
	// delivery: handed back (worker.ErrInterrupted), re-published.
	interruptHeldJob(t, src, slog.New(slog.DiscardHandler), func() { pub("v2") })
	time.Sleep(200 * time.Millisecond)
	var held []string
	for seq := uint64(1); seq <= 10; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err == nil {
			held = append(held, string(m.Data))
		}
	}
	for _, h := range held {
		if h == "v2" {
			return
		}
	}
	t.Fatalf("the newer job \"v2\" was purged by the hand-back's copy of \"v1\": the stream now holds %v (want v2 kept)", held)
}

// The copy goes to the message's stored subject. On a stream with a subject
// transform (JetStream's StreamConfig.SubjectTransform: published on in.>,
// stored as work.>), no stream listens on the stored subject, so the copy's
// publish finds no stream, HandBack fails, and the job at its last delivery
// is stranded.
//
// On the current code it prints (FAIL):
//
//	requeue_headers_test.go:NNN: the interrupted job was lost on a stream with a subject transform: HandBack
//	  failed ("... publishing a copy: nats: no response from stream"), max-deliveries advisory for [1], num_pending 0
func TestBrkRequeueOnATransformedSubjectStrandsTheJob(t *testing.T) {
	handBackErr, lost, pending := lastDeliveryHandBack(t, jetstream.StreamConfig{Name: "XF", Subjects: []string{"in.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "in.>", Destination: "work.>"},
		Retention:        jetstream.WorkQueuePolicy}, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.Publish(ctx, "in.job", []byte("job"))
		return err
	}, slog.New(slog.DiscardHandler))
	if pending == 0 || len(lost) > 0 {
		t.Fatalf("the interrupted job was lost on a stream with a subject transform: HandBack failed (%v), max-deliveries advisory for %v, num_pending %d",
			handBackErr, lost, pending)
	}
}

// hbSource records the HandBack error of its job.
type hbSource struct {
	*ldnats.Source
	err *error
}

func (s hbSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	j, err := s.Source.Fetch(ctx, wait)
	if j == nil || err != nil {
		return nil, err
	}
	return hbJob{j.(*ldnats.Job), s.err}, nil
}

type hbJob struct {
	*ldnats.Job
	err *error
}

func (j hbJob) HandBack(ctx context.Context, d time.Duration) error {
	err := j.Job.HandBack(ctx, d)
	*j.err = err
	return err
}
