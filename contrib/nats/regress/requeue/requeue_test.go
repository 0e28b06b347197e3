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
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type brkLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *brkLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *brkLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestBrkRequeueWithExpectedHeadersStrandsTheJob(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"},
		Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Second, MaxDeliver: 1})
	if err != nil {
		t.Fatal(err)
	}
	var advMu sync.Mutex
	var maxed []uint64
	if _, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.JOBS.w", func(m *nats.Msg) {
		var a struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		_ = json.Unmarshal(m.Data, &a)
		advMu.Lock()
		maxed = append(maxed, a.StreamSeq)
		advMu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	// One pending job per entity: published only if none is pending for it.
	if _, err := js.Publish(ctx, "jobs.entity-42", []byte("recompute 42"), jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatal(err)
	}

	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	log := &brkLog{}
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0", DrainMode: worker.DrainInterrupt,
		Logger: slog.New(slog.NewTextHandler(log, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	var handBackErr error
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: hbSource{src, &handBackErr}, FetchWait: time.Second,
		Handle: func(ctx context.Context, j worker.Job) error {
			once.Do(func() { close(started) })
			<-ctx.Done() // a long job: interrupted by the drain, checkpointed
			return context.Cause(ctx)
		}}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	<-started
	stop() // a rollout: SIGTERM, drain mode interrupt: the job is handed back (worker.ErrInterrupted)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	time.Sleep(2500 * time.Millisecond) // past the 1s ack wait
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	advMu.Lock()
	lost := append([]uint64(nil), maxed...)
	advMu.Unlock()
	if ci.NumPending == 0 || len(lost) > 0 {
		line := ""
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "hand") {
				line = l
			}
		}
		t.Fatalf("the interrupted job was lost: HandBack at its last delivery failed (%v), the max-deliveries advisory fired for stream sequence(s) %v and no copy is in the stream (num_pending %d); the worker logged: %s",
			handBackErr, lost, ci.NumPending, line)
	}
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
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "LATEST", Subjects: []string{"latest.>"},
		Retention: jetstream.WorkQueuePolicy, AllowRollup: true})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: 1})
	if err != nil {
		t.Fatal(err)
	}
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
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0", DrainMode: worker.DrainInterrupt,
		Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Second,
		Handle: func(ctx context.Context, j worker.Job) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return context.Cause(ctx)
		}}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	<-started
	pub("v2") // the newer job for the entity, published while v1 runs
	stop()    // the drain interrupts v1 at its last delivery: handed back (worker.ErrInterrupted), re-published
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
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
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "XF", Subjects: []string{"in.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "in.>", Destination: "work.>"},
		Retention:        jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Second, MaxDeliver: 1})
	if err != nil {
		t.Fatal(err)
	}
	var advMu sync.Mutex
	var maxed []uint64
	if _, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.XF.w", func(m *nats.Msg) {
		var a struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		_ = json.Unmarshal(m.Data, &a)
		advMu.Lock()
		maxed = append(maxed, a.StreamSeq)
		advMu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "in.job", []byte("job")); err != nil {
		t.Fatal(err)
	}
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0", DrainMode: worker.DrainInterrupt,
		Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	var handBackErr error
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: hbSource{src, &handBackErr}, FetchWait: time.Second,
		Handle: func(ctx context.Context, j worker.Job) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return context.Cause(ctx)
		}}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	<-started
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	advMu.Lock()
	defer advMu.Unlock()
	if ci.NumPending == 0 || len(maxed) > 0 {
		t.Fatalf("the interrupted job was lost on a stream with a subject transform: HandBack failed (%v), max-deliveries advisory for %v, num_pending %d",
			handBackErr, maxed, ci.NumPending)
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
