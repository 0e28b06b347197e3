package ldnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of the copy that [Job.HandBack] publishes when the runner hands
// back a job at its last delivery (docs/runners.md, "Hand-backs and
// delivery limits"). A dead-letter tool or a handler may read them.
const (
	// HeaderRequeuedFrom holds the stream sequence, in decimal, of the
	// message the copy replaces.
	HeaderRequeuedFrom = "Lameduck-Requeued-From"
	// HeaderRequeueCause holds the runner's reason for the hand-back, the
	// text of [worker.HandBackCause].
	HeaderRequeueCause = "Lameduck-Requeue-Cause"
)

// settleTimeout bounds each round trip of an Ack or a HandBack.
const settleTimeout = 5 * time.Second

// defaultAckWait is the server's AckWait when a consumer's cached
// configuration names none.
const defaultAckWait = 30 * time.Second

// SourceConfig configures a [Source]. The zero value is usable.
type SourceConfig struct {
	// ID names a job in the runner's logs and probe bodies, from its
	// message. Nil means the message's Nats-Msg-Id header (the publisher's
	// jetstream.WithMsgID). An empty answer names the job
	// "seq-<stream sequence>". It is called once per delivery, from Fetch.
	ID func(msg jetstream.Msg) string
	// Logger receives a warning when an in-progress ack fails (the job may
	// then be redelivered while it runs). Nil means slog.Default().
	Logger *slog.Logger
}

// Source is a [worker.Source] on a JetStream pull consumer: give it to a
// [worker.Loop]. Each Fetch asks the consumer for one message; the job it
// returns is a [*Job].
//
// While a job is in flight (from Fetch until its Ack or HandBack), the
// Source sends an in-progress ack (jetstream.Msg.InProgress) every third
// of the consumer's AckWait, so the server does not redeliver a job that
// runs longer than its ack wait, however long it runs: the handler needs
// no keep-alive of its own. The AckWait is the one the consumer had when
// the handle passed to [NewSource] was obtained (jetstream.Consumer's
// CachedInfo); a change made to the consumer later is seen by a new
// Source.
//
// Create one with [NewSource]; the zero value is not usable. A Source is
// safe for concurrent use: several loops may share one.
type Source struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	cons       jetstream.Consumer
	maxDeliver int           // the consumer's MaxDeliver; ≤ 0: unlimited
	every      time.Duration // the in-progress ack interval
	id         func(jetstream.Msg) string
	log        *slog.Logger
}

// NewSource returns a Source on cons, a pull consumer of a stream of js.
// The connection of js (js.Conn()) carries the acks, and the copies
// published by a hand-back at a job's last delivery.
//
// It does no I/O: it reads the consumer's cached configuration, and
// returns an error when js or cons is nil, or when the consumer's
// AckPolicy is not jetstream.AckExplicitPolicy (a runner acknowledges
// each job on its own; create the consumer with AckExplicitPolicy).
func NewSource(js jetstream.JetStream, cons jetstream.Consumer, cfg SourceConfig) (*Source, error) {
	if js == nil || cons == nil {
		return nil, errors.New("lameduck: ldnats.NewSource: js and cons must not be nil; pass the JetStream handle and the pull consumer the runner reads")
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, errors.New("lameduck: ldnats.NewSource: the consumer has no cached information; obtain it with Stream.Consumer, CreateConsumer or CreateOrUpdateConsumer")
	}
	cc := info.Config
	if cc.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("lameduck: ldnats.NewSource: consumer %q has AckPolicy %s; a runner acknowledges each job on its own: use jetstream.AckExplicitPolicy",
			info.Name, cc.AckPolicy)
	}
	ackWait := cc.AckWait
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	s := &Source{nc: js.Conn(), js: js, cons: cons, maxDeliver: cc.MaxDeliver, every: ackWait / 3, id: cfg.ID, log: cfg.Logger}
	if s.id == nil {
		s.id = func(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// InProgressEvery is how often a job in flight sends an in-progress ack: a
// third of the consumer's AckWait (30s when its configuration names none).
func (s *Source) InProgressEvery() time.Duration { return s.every }

// fetchHeartbeat is the idle heartbeat a fetch of wait asks the server
// for: a third of wait, at most 5s (nats.go's own default for long pulls);
// none under 150ms of wait. Two heartbeats missed end the fetch in silence
// (worker.ErrNoReply), before the fetch's own deadline.
func fetchHeartbeat(wait time.Duration) time.Duration {
	if wait < 150*time.Millisecond {
		return 0
	}
	return min(wait/3, 5*time.Second)
}

// fetchDeadline is the deadline of a fetch's context such that nats.go's
// pull request expires on the server after wait (nats.go gives the server
// the context's time left less a tenth of it, at most 1s).
func fetchDeadline(wait time.Duration) time.Duration {
	if wait >= 9*time.Second {
		return wait + time.Second
	}
	return wait * 10 / 9
}

// Fetch asks the consumer for one message, waiting up to wait, and
// returns it as a [*Job]. It asks the server for idle heartbeats while the
// request waits: a third of wait, at most 5s, none when wait is under
// 150ms. It returns:
//
//   - the job, its in-progress acks started;
//   - (nil, nil) when the request ended with no message on the server's
//     own answer (its expiry, heartbeats having come meanwhile): an idle
//     cycle of the loop; and when ctx was cancelled (the drain began);
//   - an error wrapping [worker.ErrNoReply] when two heartbeats in a row
//     did not come: the server or the connection stopped answering, a
//     failed cycle that liveness sees (docs/runners.md, "Silent fetches");
//   - nats.go's error otherwise (the connection is closed, the consumer
//     was deleted): a failed fetch, which still counts as a cycle.
//
// Fetch does not retry; the loop does.
func (s *Source) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	fctx, cancel := context.WithTimeout(ctx, fetchDeadline(wait))
	defer cancel()
	opts := []jetstream.FetchOpt{jetstream.FetchContext(fctx)}
	hb := fetchHeartbeat(wait)
	if hb > 0 {
		opts = append(opts, jetstream.FetchHeartbeat(hb))
	}
	batch, err := s.cons.Fetch(1, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	for msg := range batch.Messages() {
		return s.newJob(msg), nil
	}
	switch err := batch.Error(); {
	case err == nil || ctx.Err() != nil:
		return nil, nil
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		return nil, fmt.Errorf("%w: no heartbeat for %s, and the server sends one every %s while a fetch waits (%v)", worker.ErrNoReply, 2*hb, hb, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		// The request's end came late, heartbeats having come: idle.
		return nil, nil
	default:
		return nil, err
	}
}

// Job is one message delivered by a [Source]: a [worker.Job]. Ack
// acknowledges it, HandBack returns it to the stream; a consume loop calls
// exactly one of them, once. Until then the job sends in-progress acks
// (see [Source]); code that uses a Source outside a worker must settle
// every job, or its in-progress acks go on.
//
// Its methods are safe for concurrent use.
type Job struct {
	src  *Source
	msg  jetstream.Msg
	id   string
	stop chan struct{} // closed when the job is settled
	kept chan struct{} // closed when the in-progress acks have stopped
	once sync.Once     // closes stop
}

func (s *Source) newJob(msg jetstream.Msg) *Job {
	j := &Job{src: s, msg: msg, stop: make(chan struct{}), kept: make(chan struct{})}
	j.id = s.id(msg)
	if j.id == "" {
		if md, err := msg.Metadata(); err == nil {
			j.id = "seq-" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
	}
	go j.keepInProgress()
	return j
}

// keepInProgress sends an in-progress ack every s.every until the job is
// settled or the connection is closed.
func (j *Job) keepInProgress() {
	defer close(j.kept)
	tick := time.NewTicker(j.src.every)
	defer tick.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-tick.C:
			if err := j.msg.InProgress(); errors.Is(err, nats.ErrConnectionClosed) {
				return
			} else if err != nil {
				j.src.log.Warn("lameduck: nats: in-progress ack failed; the job may be redelivered", "job", j.id, "error", err.Error())
			}
		}
	}
}

// settle stops the in-progress acks and waits until none can follow.
func (j *Job) settle() {
	j.once.Do(func() { close(j.stop) })
	<-j.kept
}

// ID is the job's name (see SourceConfig.ID).
func (j *Job) ID() string { return j.id }

// Msg is the delivered message: its data, headers and metadata (the
// delivery count, the stream sequence). Settle the job through Ack or
// HandBack, not through the message.
func (j *Job) Msg() jetstream.Msg { return j.msg }

// LastDelivery reports whether the consumer will not deliver the message
// again after a NAK: the consumer has a MaxDeliver and this delivery is
// its last. HandBack then re-publishes a job the runner hands back (see
// HandBack); a handler may use it to record a job about to fail for good.
func (j *Job) LastDelivery() bool {
	if j.src.maxDeliver <= 0 {
		return false
	}
	md, err := j.msg.Metadata()
	return err == nil && md.NumDelivered >= uint64(j.src.maxDeliver)
}

// Ack stops the job's in-progress acks, acknowledges the message and waits
// for the server's confirmation (jetstream.Msg.DoubleAck), bounded by ctx
// and by 5s, so a job reported done is not delivered again. It returns
// nats.go's error when the server did not confirm.
func (j *Job) Ack(ctx context.Context) error {
	j.settle()
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	return j.msg.DoubleAck(ctx)
}

// HandBack stops the job's in-progress acks and returns the job to the
// stream, waiting until the server has it, so that a process that exits
// next cannot lose it (docs/runners.md, "Hand-backs and delivery limits").
// Each round trip is bounded by ctx and by 5s.
//
//   - The job's own failure ([worker.HandBackCause] nil), or a runner's
//     reason before the job's last delivery: a NAK, with delay when it is
//     positive (jetstream.Msg.NakWithDelay), then a flush of the
//     connection (a NAK has no reply; the flush's round trip comes after
//     it). A NAK counts as a delivery: a job that keeps failing reaches
//     the consumer's MaxDeliver, and the server stops delivering it and
//     publishes its max-deliveries advisory, the hook of a dead-letter
//     policy.
//   - A runner's reason at the job's last delivery ([Job.LastDelivery]):
//     a NAK would strand a job that never failed, so a copy is published
//     to the stream (same subject, data and headers; a fresh Nats-Msg-Id,
//     the original's or the job's ID followed by
//     ".requeued-from-<sequence>", so the stream's duplicate window does
//     not drop it; the headers [HeaderRequeuedFrom] and
//     [HeaderRequeueCause]), confirmed by the server, and then the
//     original is acknowledged. The copy starts with a fresh delivery
//     count and at the back of the queue, delivered at once whatever the
//     delay asked. Should the acknowledgement fail after the copy is
//     stored, the job exists twice (at least once, never lost); the error
//     says so.
func (j *Job) HandBack(ctx context.Context, delay time.Duration) error {
	j.settle()
	if cause := worker.HandBackCause(ctx); cause != nil && j.LastDelivery() {
		return j.requeue(ctx, cause)
	}
	var err error
	if delay > 0 {
		err = j.msg.NakWithDelay(delay)
	} else {
		err = j.msg.Nak()
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	return j.src.nc.FlushWithContext(ctx)
}

// requeue publishes a copy of the message and acknowledges the original.
func (j *Job) requeue(ctx context.Context, cause error) error {
	md, err := j.msg.Metadata()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	out := nats.NewMsg(j.msg.Subject())
	out.Data = j.msg.Data()
	for k, v := range j.msg.Headers() {
		out.Header[k] = append([]string(nil), v...)
	}
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	id := j.msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		id = j.id
	}
	out.Header.Set(jetstream.MsgIDHeader, id+".requeued-from-"+seq)
	out.Header.Set(HeaderRequeuedFrom, seq)
	out.Header.Set(HeaderRequeueCause, cause.Error())
	if _, err := j.src.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("lameduck: nats: last delivery (%d of MaxDeliver %d): publishing a copy: %w", md.NumDelivered, j.src.maxDeliver, err)
	}
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("lameduck: nats: last delivery (%d of MaxDeliver %d): copy published, but acknowledging the original failed (the job may run twice): %w",
			md.NumDelivered, j.src.maxDeliver, err)
	}
	return nil
}
