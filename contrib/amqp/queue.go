package ldamqp

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultMaxDeliveries is the MaxDeliveries of a [Queue] that sets none:
// a job that keeps failing is delivered 20 times, then dead-lettered.
const DefaultMaxDeliveries = 20

// DefaultDeliveryLimit is the x-delivery-limit of a [Queue] that sets
// none: 20, the default RabbitMQ 4 gives a quorum queue declared without
// one (RabbitMQ 3 has none: it redelivers for ever).
const DefaultDeliveryLimit = 20

// Headers that a [Source] sets on the copy of a job it publishes (a job
// handed back with a delay, or for the runner's own reason; see
// [Job.HandBack]). A handler or a dead-letter tool may read them.
const (
	// HeaderDeliveries holds, as an integer, the deliveries of the job
	// that count against the queue's delivery limit and were spent
	// before this copy was published: a copy starts a fresh
	// x-delivery-count, and this header carries the old one on. It is
	// absent on a job no Source has published.
	HeaderDeliveries = "lameduck-deliveries"
	// HeaderRequeueCause holds the runner's reason for the hand-back (the
	// text of [worker.HandBackCause]) on a copy published for it; a copy
	// published for the job's own failure has none.
	HeaderRequeueCause = "lameduck-requeue-cause"
)

// waitExpiry is how long a wait queue outlives the last copy published to
// it, beyond twice its TTL: an idle wait queue is deleted by RabbitMQ
// (x-expires), long after its last job left it.
const waitExpiry = time.Hour

// maxQueueName is AMQP 0-9-1's limit on a queue name, in bytes.
const maxQueueName = 255

// waitSuffixMax is the longest suffix a wait queue's name adds to its work
// queue's: ".lameduck-wait-" and a delay of up to 19 digits, "ms".
const waitSuffixMax = len(".lameduck-wait-") + 19 + len("ms")

// Queue describes the RabbitMQ quorum queue a [Source] consumes, as
// [DeclareQueue] declares it. Give the Source the same Queue the queue was
// declared with: RabbitMQ does not tell a client a queue's arguments.
//
// A job's deliveries are counted twice. The Source counts them against
// MaxDeliveries: the job's own failures, carried from copy to copy in
// [HeaderDeliveries], plus the returns RabbitMQ counts itself in
// x-delivery-count. RabbitMQ counts against DeliveryLimit only its own
// returns: on RabbitMQ 3 every delivery that goes back to the queue, on
// 4.3 the rejected ones. The Source never lets RabbitMQ count a failure or
// a hand-back (it re-publishes the job instead, see [Job.HandBack]), so
// x-delivery-count, and DeliveryLimit, see only the deliveries RabbitMQ
// took back from a channel that closed holding them (a runner killed
// mid-job, a broken connection, the consumer timeout) and, on RabbitMQ 3,
// the one a consumer's cancel races (see [Source.Drain]).
type Queue struct {
	// Name is the work queue's name. Required; at most 255 bytes less the
	// wait queues' suffix (".lameduck-wait-<ms>ms", at most 36 bytes).
	Name string
	// MaxDeliveries is how many times a job may be delivered, its first
	// delivery included, before its failure dead-letters it: 1 runs a job
	// once, 5 retries a failing job 4 times (JetStream's MaxDeliver). The
	// Source enforces it: a failure at the job's last delivery
	// ([Job.LastDelivery]) is rejected without requeue, and RabbitMQ
	// dead-letters it (to DeadLetterQueue; with no dead-letter exchange
	// it drops it). The runner's own hand-backs never count against it.
	// Zero means DefaultMaxDeliveries (20); negative is an error.
	MaxDeliveries int
	// DeliveryLimit is the queue's x-delivery-limit: how many returns
	// RabbitMQ counts itself before it dead-letters (or drops) a job. As
	// the Source never has RabbitMQ count a failure, it bounds the
	// returns from channels that closed holding the job since its last
	// copy: the net that stops a job that kills its runner every time.
	// Keep it well above the deliveries a drain storm can take back (the
	// default does). Zero means DefaultDeliveryLimit (20); negative is an
	// error (RabbitMQ 3 reads a limit below 1 as "dead-letter at the first
	// return").
	DeliveryLimit int
	// DeadLetterQueue, when set, names a quorum queue that receives the
	// jobs dead-lettered: DeclareQueue declares it too, and the work queue
	// dead-letters to it through the default exchange, at least once
	// (x-dead-letter-strategy at-least-once, which needs x-overflow
	// reject-publish). Empty: the work queue has no dead-letter exchange
	// unless Arguments name one, and RabbitMQ drops a job instead.
	DeadLetterQueue string
	// Arguments are added to the work queue's arguments at declaration,
	// and override those DeclareQueue sets (x-queue-type, x-delivery-limit,
	// the dead-letter ones). Use it for x-consumer-timeout (RabbitMQ
	// 3.11.15, 3.12 and later; docs/amqp.md, "Long jobs: the consumer
	// timeout") or a dead-letter exchange of your own.
	Arguments amqp.Table
}

// maxDeliveries is MaxDeliveries, DefaultMaxDeliveries for zero.
func (q Queue) maxDeliveries() int {
	if q.MaxDeliveries == 0 {
		return DefaultMaxDeliveries
	}
	return q.MaxDeliveries
}

// limit is the delivery limit, DefaultDeliveryLimit for zero.
func (q Queue) limit() int {
	if q.DeliveryLimit == 0 {
		return DefaultDeliveryLimit
	}
	return q.DeliveryLimit
}

// check returns the first thing wrong with q, in lameduck's words, for the
// function what.
func (q Queue) check(what string) error {
	switch {
	case q.Name == "":
		return fmt.Errorf("lameduck: %s: Queue.Name is empty; name the work queue the runner consumes", what)
	case len(q.Name) > maxQueueName-waitSuffixMax:
		return fmt.Errorf("lameduck: %s: Queue.Name %q is %d bytes; at most %d leave room for its wait queues' names (%q): shorten it",
			what, q.Name, len(q.Name), maxQueueName-waitSuffixMax, q.Name+".lameduck-wait-1000ms")
	case q.MaxDeliveries < 0:
		return fmt.Errorf("lameduck: %s: Queue.MaxDeliveries=%d must not be negative; use 0 for %d, or the deliveries a failing job may have (1: no retry)",
			what, q.MaxDeliveries, DefaultMaxDeliveries)
	case q.DeliveryLimit < 0:
		return fmt.Errorf("lameduck: %s: Queue.DeliveryLimit=%d must not be negative (RabbitMQ 3 dead-letters a job at its first return with a limit below 1); use 0 for %d, or a positive limit",
			what, q.DeliveryLimit, DefaultDeliveryLimit)
	case q.DeadLetterQueue == q.Name:
		return fmt.Errorf("lameduck: %s: Queue.DeadLetterQueue %q is the work queue itself; name another queue, or leave it empty", what, q.DeadLetterQueue)
	}
	return nil
}

// arguments are the work queue's declaration arguments.
func (q Queue) arguments() amqp.Table {
	args := amqp.Table{
		"x-queue-type":     "quorum",
		"x-delivery-limit": int64(q.limit()),
	}
	if q.DeadLetterQueue != "" {
		args["x-dead-letter-exchange"] = ""
		args["x-dead-letter-routing-key"] = q.DeadLetterQueue
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	for k, v := range q.Arguments {
		args[k] = v
	}
	return args
}

// DeclareQueue declares, on ch, the quorum queue q describes (durable,
// x-queue-type quorum, x-delivery-limit, its dead-letter route and q's
// Arguments), after its DeadLetterQueue (a durable quorum queue with no
// arguments) when q names one. Declaring a queue that exists with the same
// arguments does nothing, so every runner and publisher may call it at
// startup.
//
// It returns an error naming the fix when q is invalid, and amqp091-go's
// error, wrapped, when RabbitMQ refuses: a queue that exists with other
// arguments (PRECONDITION_FAILED, 406) closes ch, and RabbitMQ's reason
// names the argument that differs. The wait queues of delayed hand-backs
// are not declared here: the [Source] declares each as it first needs it.
func DeclareQueue(ch *amqp.Channel, q Queue) error {
	if err := q.check("ldamqp.DeclareQueue"); err != nil {
		return err
	}
	if ch == nil {
		return errors.New("lameduck: ldamqp.DeclareQueue: the *amqp.Channel is nil; open one with Connection.Channel")
	}
	if q.DeadLetterQueue != "" {
		if _, err := ch.QueueDeclare(q.DeadLetterQueue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return fmt.Errorf("lameduck: ldamqp.DeclareQueue: the dead-letter queue %q: %w", q.DeadLetterQueue, err)
		}
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, q.arguments()); err != nil {
		return fmt.Errorf("lameduck: ldamqp.DeclareQueue: queue %q: %w; a queue declared earlier with other arguments must be deleted (or given a new name) before it can take these",
			q.Name, err)
	}
	return nil
}

// WaitQueue returns the name of the wait queue that holds the jobs of q
// handed back with delay, and that queue's message TTL: delay rounded up
// to whole milliseconds and then to two significant digits (at most 10%
// more; 1s stays 1s, 128s becomes 130s), so a runner's delays, which
// double from its failure backoff, share a few wait queues. A job waits
// there for the TTL, and RabbitMQ then dead-letters it back to q (at least
// once). The name is q.Name followed by ".lameduck-wait-<TTL in ms>ms".
// A delay of zero or less has no wait queue: it returns "" and 0.
func (q Queue) WaitQueue(delay time.Duration) (name string, ttl time.Duration) {
	if delay <= 0 {
		return "", 0
	}
	ms := int64(math.Ceil(float64(delay) / float64(time.Millisecond)))
	if ms >= 100 {
		p := int64(math.Pow10(len(strconv.FormatInt(ms, 10)) - 2))
		ms = (ms + p - 1) / p * p
	}
	return q.Name + ".lameduck-wait-" + strconv.FormatInt(ms, 10) + "ms", time.Duration(ms) * time.Millisecond
}

// DeclareWaitQueue declares on ch the wait queue that holds q's jobs
// handed back with delay ([Queue.WaitQueue]), as a [Source] does before
// it publishes a copy there, and returns its name: a durable quorum queue
// whose jobs expire after its TTL into q, at least once
// (x-dead-letter-strategy at-least-once), and which RabbitMQ deletes once
// it has gone unused for twice its TTL plus an hour (x-expires; a declare
// uses it). The Source declares the wait queues it needs; declare them
// ahead to watch them or set policies on them.
//
// It returns an error when delay is not positive, when q is invalid, and
// amqp091-go's error, wrapped, when RabbitMQ refuses (a queue of that
// name declared with other arguments: PRECONDITION_FAILED, which closes
// ch).
func DeclareWaitQueue(ch *amqp.Channel, q Queue, delay time.Duration) (string, error) {
	if err := q.check("ldamqp.DeclareWaitQueue"); err != nil {
		return "", err
	}
	if ch == nil {
		return "", errors.New("lameduck: ldamqp.DeclareWaitQueue: the *amqp.Channel is nil; open one with Connection.Channel")
	}
	name, ttl := q.WaitQueue(delay)
	if name == "" {
		return "", fmt.Errorf("lameduck: ldamqp.DeclareWaitQueue: delay=%s has no wait queue; a hand-back of no delay goes straight to the work queue: pass a positive delay", delay)
	}
	if err := declareWait(ch, q, name, ttl); err != nil {
		return "", fmt.Errorf("lameduck: ldamqp.DeclareWaitQueue: the wait queue %q: %w", name, err)
	}
	return name, nil
}

// declareWait declares q's wait queue name of ttl on ch.
func declareWait(ch *amqp.Channel, q Queue, name string, ttl time.Duration) error {
	_, err := ch.QueueDeclare(name, true, false, false, false, q.waitArguments(ttl))
	return err
}

// waitArguments are the declaration arguments of q's wait queue of ttl: a
// quorum queue whose jobs expire after ttl into q, at least once, and
// which RabbitMQ deletes once unused for twice ttl plus waitExpiry.
func (q Queue) waitArguments(ttl time.Duration) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-message-ttl":             ttl.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q.Name,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
		"x-expires":                 (2*ttl + waitExpiry).Milliseconds(),
	}
}
