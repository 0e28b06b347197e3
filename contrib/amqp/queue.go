package ldamqp

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultDeliveryLimit is the x-delivery-limit of a [Queue] whose
// DeliveryLimit is zero: 20, the default RabbitMQ 4 gives a quorum queue
// declared without one (RabbitMQ 3 has none: it redelivers for ever).
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
// [DeclareQueue] declares it. The Source must be given the same Queue the
// queue was declared with: RabbitMQ does not tell a client a queue's
// arguments, and the Source needs the delivery limit to know a job's last
// delivery.
type Queue struct {
	// Name is the work queue's name. Required; at most 255 bytes less the
	// wait queues' suffix (".lameduck-wait-<ms>ms", at most 36 bytes).
	Name string
	// DeliveryLimit is the queue's x-delivery-limit: how many times a job
	// may be returned to the queue and delivered again after its first
	// delivery, so DeliveryLimit+1 deliveries in all; at the next return
	// RabbitMQ dead-letters it (to DeadLetterQueue) or, with no
	// dead-letter exchange, drops it. Only the job's own failures count
	// (see [Job.HandBack]); the runner's hand-backs never do. Zero means
	// DefaultDeliveryLimit (20); negative is an error (RabbitMQ 3 reads a
	// limit below 1 as "drop at the first return").
	DeliveryLimit int
	// DeadLetterQueue, when set, names a quorum queue that receives the
	// jobs that exceed DeliveryLimit: DeclareQueue declares it too, and
	// the work queue dead-letters to it through the default exchange,
	// at least once (x-dead-letter-strategy at-least-once, which needs
	// x-overflow reject-publish). Empty: the work queue has no dead-letter
	// exchange unless Arguments name one, and RabbitMQ drops a job that
	// exceeds the limit.
	DeadLetterQueue string
	// Arguments are added to the work queue's arguments at declaration,
	// and override those DeclareQueue sets (x-queue-type, x-delivery-limit,
	// the dead-letter ones). Use it for x-consumer-timeout (RabbitMQ
	// 3.12 and later; see docs/amqp.md, "Long jobs") or a dead-letter
	// exchange of your own. Setting x-delivery-limit here desynchronises
	// the Source from the queue: use DeliveryLimit.
	Arguments amqp.Table
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
	case q.DeliveryLimit < 0:
		return fmt.Errorf("lameduck: %s: Queue.DeliveryLimit=%d must not be negative (RabbitMQ 3 drops a job at its first return with a limit below 1); use 0 for %d, or a positive limit",
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
