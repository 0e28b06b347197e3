package ldamqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// settleTimeout bounds each round trip of an Ack or a HandBack (a method
// and its proof, a copy's confirmation), within ctx.
const settleTimeout = 10 * time.Second

// Job is one delivery of a [Source]: a [worker.Job] and a
// [worker.Delivered]. Ack acknowledges it, HandBack returns it to the
// queue; a consume loop calls exactly one of them, once. Until then the
// delivery stays unacknowledged on its channel, RabbitMQ's claim that no
// one else runs it.
//
// Its methods are safe for concurrent use; a second Ack or HandBack
// returns an error and does nothing.
type Job struct {
	c        *consumer
	d        amqp.Delivery
	prior    int // HeaderDeliveries: counted deliveries before this copy was published
	returned int // x-delivery-count: counted returns of this copy, as RabbitMQ says

	idOnce  sync.Once
	id      string
	settled atomic.Bool
}

// ID is the job's name: SourceConfig.ID's answer, by default the
// message's MessageId (possibly empty: the loop then names the job
// <loop>#<n>). A panic in SourceConfig.ID propagates, and the loop
// recovers it.
func (j *Job) ID() string {
	j.idOnce.Do(func() { j.id = j.c.src.id(&j.d) })
	return j.id
}

// name is the job's ID for the Source's own errors and logs: a panic in
// SourceConfig.ID must not stop a settlement or a drain half-way, so it
// names the job by its delivery tag instead.
func (j *Job) name() (id string) {
	defer func() {
		if recover() != nil {
			id = "delivery-tag-" + strconv.FormatUint(j.d.DeliveryTag, 10)
		}
	}()
	return j.ID()
}

// Msg is the delivery: its body, properties and headers. Read it, never
// modify it, and settle the job through Ack or HandBack, never through
// the delivery's own methods (the Source would not know, and a job
// settled twice closes the channel with every job on it).
func (j *Job) Msg() *amqp.Delivery { return &j.d }

// Delivery reports how many times the job has been delivered, this
// delivery included, counting what counts against Queue.MaxDeliveries: 1
// the first time, then one more for each of the job's failures and for
// each return RabbitMQ counted itself (a channel that closed holding it,
// on RabbitMQ 3); the runner's hand-backs count nothing. It is the
// HeaderDeliveries a copy carries, plus RabbitMQ's x-delivery-count of a
// redelivered message, plus one.
func (j *Job) Delivery() int { return j.prior + j.returned + 1 }

// LastDelivery reports whether this delivery is the job's last:
// Delivery() ≥ Queue.MaxDeliveries, so that HandBack of a failure now
// dead-letters it. A handler may use it to record a job about to fail for
// good.
func (j *Job) LastDelivery() bool { return j.Delivery() >= j.c.src.most }

// Ack acknowledges the delivery (basic.ack) and then makes a synchronous
// round trip on the same channel (basic.qos, unchanged), whose reply
// proves RabbitMQ's channel has processed the ack (AMQP 0-9-1 processes a
// channel's methods in order), so a job reported done is not delivered
// again; a broker node that crashes before the quorum queue commits it
// may still deliver it again (at least once). The round trip is bounded
// by ctx and by 10s. RabbitMQ 4.3 ignores the ack of a delivery its
// consumer timeout already took back, and delivers the job again: keep
// the timeout above the longest job (SourceConfig.ConsumerTimeout).
//
// It returns an error when the channel closed before the ack (RabbitMQ
// requeued the job, and delivers it again: the job runs twice, at least
// once) or before the proof (the ack may or may not have been processed),
// and when the job was already settled.
func (j *Job) Ack(ctx context.Context) error {
	if !j.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("lameduck: amqp: ack of job %q: the job was already acknowledged or handed back", j.name())
	}
	defer j.c.release()
	if err := j.ack(ctx); err != nil {
		return fmt.Errorf("lameduck: amqp: ack of job %q: %w", j.name(), err)
	}
	return nil
}

// ack sends basic.ack and its proof.
func (j *Job) ack(ctx context.Context) error {
	if j.c.ch.IsClosed() {
		return fmt.Errorf("the channel closed before the ack (%s): RabbitMQ requeued the job and delivers it again (it runs twice: at least once)", j.c.reason())
	}
	if err := j.c.ch.Ack(j.d.DeliveryTag, false); err != nil {
		return fmt.Errorf("basic.ack: %w: RabbitMQ requeues the job when the channel closes, and delivers it again (it runs twice: at least once)", err)
	}
	return j.proof(ctx, "the ack")
}

// proof makes the round trip that proves RabbitMQ processed what was sent
// before it on the channel, bounded by ctx and settleTimeout.
func (j *Job) proof(ctx context.Context, what string) error {
	ctx, cancel := context.WithTimeoutCause(ctx, settleTimeout,
		fmt.Errorf("no reply within %s", settleTimeout))
	defer cancel()
	if err := j.c.sync(ctx); err != nil {
		return fmt.Errorf("%s was sent, but the round trip that proves RabbitMQ processed it failed (%w): if the channel closes before it is processed, RabbitMQ requeues the job and delivers it again", what, err)
	}
	return nil
}

// HandBack returns the job to the queue, to be delivered again after
// delay (zero: at once), and returns once RabbitMQ has it back, so that a
// process exiting next cannot strand it (docs/amqp.md, "The failure
// table"). [worker.HandBackCause](ctx) says why, and decides how:
//
//   - the job's own failure (cause nil) at its last delivery
//     ([Job.LastDelivery]): basic.reject without requeue; RabbitMQ
//     dead-letters the job (to Queue.DeadLetterQueue; with no dead-letter
//     exchange it drops it), and a warning is logged;
//   - the job's own failure before its last delivery: a copy carrying
//     [HeaderDeliveries] = Delivery() (this failure counted), published
//     to the work queue (delay 0) or to the wait queue of delay
//     ([Queue.WaitQueue]), whose TTL then dead-letters it back to the
//     work queue; once RabbitMQ confirms the copy, the original is
//     acknowledged;
//   - the runner's own reason (a drain, the drain bound, a superseded
//     epoch), any delay, even at the last delivery: the same copy, with
//     HeaderDeliveries = Delivery()−1 (this delivery not counted) and
//     [HeaderRequeueCause]. It never counts and never dead-letters.
//
// A copy, rather than a requeue (basic.reject or basic.nack with
// requeue), because RabbitMQ 3 counts every requeue in x-delivery-count
// and would dead-letter at x-delivery-limit a job handed back for the
// runner's reason; a copy starts a fresh x-delivery-count and carries the
// Source's own count, the same on every RabbitMQ version. It goes to the
// back of the queue.
//
// A copy keeps the body and the properties but user-id (RabbitMQ refuses
// one that is not the publishing connection's user) and, in a wait queue,
// expiration (the wait queue's TTL applies); of the headers it drops
// those that route (CC, BCC) and RabbitMQ's own (x-death,
// x-first-death-*, x-last-death-*, x-delivery-count), so RabbitMQ's
// dead-letter cycle detection never drops it. It is published through the
// default exchange, mandatory, with publisher confirms, on a channel of
// its own; a wait queue is declared before each publish (which renews its
// x-expires).
//
// Each round trip is bounded by ctx and by 10s. It returns an error, with
// what RabbitMQ will do with the job, when the channel closed first
// (RabbitMQ requeued the job at the close: it is delivered again at once,
// without the delay), when the copy could not be published and confirmed
// (the job is requeued instead, for redelivery at once, which RabbitMQ 3
// counts, unless that would reach x-delivery-limit: it then stays
// unacknowledged until its channel closes), when the original's ack
// failed after its copy was confirmed (the job exists twice: at least
// once, never lost), and when the job was already settled.
func (j *Job) HandBack(ctx context.Context, delay time.Duration) error {
	return j.handBack(ctx, delay, worker.HandBackCause(ctx))
}

// handBack is HandBack with its cause given.
func (j *Job) handBack(ctx context.Context, delay time.Duration, cause error) error {
	if !j.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("lameduck: amqp: hand-back of job %q: the job was already acknowledged or handed back", j.name())
	}
	defer j.c.release()
	if err := j.giveBack(ctx, delay, cause); err != nil {
		return fmt.Errorf("lameduck: amqp: hand-back of job %q: %w", j.name(), err)
	}
	return nil
}

func (j *Job) giveBack(ctx context.Context, delay time.Duration, cause error) error {
	if j.c.ch.IsClosed() {
		return fmt.Errorf("the channel closed before the hand-back (%s): RabbitMQ requeued the job at the close and delivers it again at once", j.c.reason())
	}
	s := j.c.src
	switch {
	case cause == nil && j.LastDelivery():
		if err := j.c.ch.Reject(j.d.DeliveryTag, false); err != nil {
			return fmt.Errorf("basic.reject: %w: RabbitMQ requeues the job when the channel closes", err)
		}
		if err := j.proof(ctx, "the rejection"); err != nil {
			return err
		}
		s.log.Warn("lameduck: amqp: job failed at its last delivery; RabbitMQ dead-letters it",
			"queue", s.q.Name, "job", j.name(), "delivery", j.Delivery(), "max_deliveries", s.most, "dead_letter_queue", s.q.DeadLetterQueue)
		return nil
	case cause == nil:
		return j.republish(ctx, delay, j.Delivery(), nil)
	default:
		return j.republish(ctx, delay, j.Delivery()-1, cause)
	}
}

// requeue returns the delivery to the queue: basic.reject (the job's
// failure: it counts) or basic.nack (the runner's reason: RabbitMQ 4.3
// does not count it, RabbitMQ 3 does), with requeue, then the proof.
func (j *Job) requeue(ctx context.Context, failed bool) error {
	var err error
	if failed {
		err = j.c.ch.Reject(j.d.DeliveryTag, true)
	} else {
		err = j.c.ch.Nack(j.d.DeliveryTag, false, true)
	}
	if err != nil {
		return fmt.Errorf("requeue: %w: RabbitMQ requeues the job when the channel closes", err)
	}
	return j.proof(ctx, "the requeue")
}

// republish publishes a copy of the job carrying deliveries (and cause,
// when the runner gives it back) to the work queue or, for a delay, to its
// wait queue; once RabbitMQ confirms it, it acknowledges the original.
func (j *Job) republish(ctx context.Context, delay time.Duration, deliveries int, cause error) error {
	s := j.c.src
	key, ttl := s.q.WaitQueue(delay)
	if key == "" {
		key = s.q.Name
	}
	err := s.publish(ctx, key, ttl, j.copy(deliveries, cause, ttl > 0))
	if err != nil {
		// Not stored (or not known to be): the original must go back
		// itself. RabbitMQ 3 counts that return, and past x-delivery-limit
		// it would dead-letter the job.
		if j.returned >= s.limit {
			return fmt.Errorf("publishing its copy to %q failed (%w); a requeue would reach x-delivery-limit %d and dead-letter the job, so it stays unacknowledged on its channel, and RabbitMQ requeues it when the channel closes (at the latest when the process exits)",
				key, err, s.limit)
		}
		if rerr := j.requeue(ctx, cause == nil); rerr != nil {
			return fmt.Errorf("publishing its copy to %q failed (%w), and so did the requeue instead: %w", key, err, rerr)
		}
		return fmt.Errorf("publishing its copy to %q failed (%w); requeued instead: RabbitMQ delivers it again at once, without the %s delay, counting one delivery on RabbitMQ 3",
			key, err, delay)
	}
	if err := j.ack(ctx); err != nil {
		return fmt.Errorf("its copy is in %q, but acknowledging the original failed (%w); the job exists twice and runs twice (at least once)", key, err)
	}
	return nil
}

// copy is the Publishing of a copy of the job: see HandBack.
func (j *Job) copy(deliveries int, cause error, waiting bool) amqp.Publishing {
	d := &j.d
	h := make(amqp.Table, len(d.Headers)+2)
	for k, v := range d.Headers {
		if !dropped(k) {
			h[k] = v
		}
	}
	h[HeaderDeliveries] = int64(deliveries)
	delete(h, HeaderRequeueCause)
	if cause != nil {
		h[HeaderRequeueCause] = cause.Error()
	}
	p := amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	if waiting {
		p.Expiration = ""
	}
	if p.DeliveryMode == 0 {
		p.DeliveryMode = amqp.Persistent
	}
	return p
}

// dropped reports whether a copy leaves out the header k: headers that
// route the message (sender-selected distribution) and RabbitMQ's own.
func dropped(k string) bool {
	switch k {
	case "CC", "BCC", "x-death", "x-delivery-count":
		return true
	}
	return strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

// publisher is a channel copies are published on, in confirm mode, used
// by one publish at a time: a basic.return on it is that copy's.
type publisher struct {
	*channel
	conn    *amqp.Connection // the connection it is on
	returns chan amqp.Return
}

// publish publishes msg to the queue key through the default exchange,
// mandatory, and waits for RabbitMQ's confirmation, after declaring key as
// the wait queue of ttl when ttl > 0. It returns an error when the copy
// was not confirmed: refused, returned unroutable, or unanswered within
// ctx and settleTimeout (the copy may then exist). Copies published
// concurrently go out on channels of their own.
func (s *Source) publish(ctx context.Context, key string, ttl time.Duration, msg amqp.Publishing) error {
	ctx, cancel := context.WithTimeoutCause(ctx, settleTimeout, fmt.Errorf("no confirmation within %s", settleTimeout))
	defer cancel()
	p, err := s.publisher()
	if err != nil {
		return err
	}
	ok := false
	defer func() { s.release(p, ok) }()
	if ttl > 0 {
		if err := p.call(ctx, func() error { return declareWait(p.ch, s.q, key, ttl) }); err != nil {
			return fmt.Errorf("declaring the wait queue %q: %w", key, err)
		}
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", key, true, false, msg)
	if err != nil {
		return fmt.Errorf("basic.publish: %w", err)
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil: // a late return or confirmation must not be taken for the next copy's: p is closed
		return fmt.Errorf("RabbitMQ did not confirm the copy: %w", context.Cause(ctx))
	case !acked && p.ch.IsClosed():
		return fmt.Errorf("the publishing channel closed before RabbitMQ confirmed the copy (%s)", p.reason())
	case !acked:
		return errors.New("RabbitMQ refused the copy (basic.nack)")
	}
	select {
	case r := <-p.returns:
		ok = true // the return was read: the channel is clean
		return fmt.Errorf("RabbitMQ returned the copy as unroutable (%d %s): queue %q does not exist", r.ReplyCode, r.ReplyText, key)
	default:
		ok = true
		return nil
	}
}

// publisher returns an idle publishing channel on the Source's
// connection, opening one (in confirm mode) when there is none.
func (s *Source) publisher() (*publisher, error) {
	s.mu.Lock()
	closed, conn := s.closed, s.conn
	var p *publisher
	var stale []*publisher
	for len(s.pubs) > 0 && p == nil {
		p = s.pubs[len(s.pubs)-1]
		s.pubs = s.pubs[:len(s.pubs)-1]
		if p.conn != conn || p.ch.IsClosed() {
			stale, p = append(stale, p), nil
		}
	}
	s.mu.Unlock()
	for _, p := range stale { // on a connection that closed: nothing to wait for
		p.close()
	}
	switch {
	case closed:
		return nil, ErrSourceClosed
	case p != nil:
		return p, nil
	}
	ch, err := openChannel(conn)
	if err != nil {
		return nil, fmt.Errorf("opening a publishing channel: %w", err)
	}
	// amqp091-go sends a basic.return to this channel before it resolves
	// the copy's confirmation: one copy at a time needs room for one.
	p = &publisher{channel: ch, conn: conn, returns: ch.ch.NotifyReturn(make(chan amqp.Return, 1))}
	if err := ch.ch.Confirm(false); err != nil {
		ch.close()
		return nil, fmt.Errorf("putting the publishing channel in confirm mode: %w", err)
	}
	return p, nil
}

// release makes p idle again, or closes it when its last publish left it
// unclean (not ok), when it closed, or when the Source is closed.
func (s *Source) release(p *publisher, ok bool) {
	s.mu.Lock()
	keep := ok && !s.closed && p.conn == s.conn && !p.ch.IsClosed()
	if keep {
		s.pubs = append(s.pubs, p)
	}
	s.mu.Unlock()
	if !keep {
		p.close()
	}
}
