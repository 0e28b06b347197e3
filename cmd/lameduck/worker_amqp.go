package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lameduck/lameduck"
	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The demo worker's RabbitMQ names, for the queue named q (--name, "demo"):
// the quorum queue lameduck.<q>.jobs and its dead-letter queue
// lameduck.<q>.dead.
func demoAMQPQueue(q string) string { return "lameduck." + q + ".jobs" }
func demoAMQPDead(q string) string  { return "lameduck." + q + ".dead" }

// amqpQueue is the demo's quorum queue for --name and --max-deliver: a
// job's failures and RabbitMQ's own returns are limited to --max-deliver
// deliveries (-1: ldamqp's defaults, 20), after which it goes to the
// dead-letter queue, never dropped.
func amqpQueue(name string, maxDeliver int) ldamqp.Queue {
	q := ldamqp.Queue{Name: demoAMQPQueue(name), DeadLetterQueue: demoAMQPDead(name)}
	if maxDeliver > 0 {
		q.MaxDeliveries, q.DeliveryLimit = maxDeliver, maxDeliver
	}
	return q
}

// dialAMQP dials RabbitMQ at url, without amqp091-go's automatic recovery
// (ldamqp.Source refuses it; it redials through SourceConfig.Redial).
func dialAMQP(url string) (*amqp.Connection, error) {
	return amqp.DialConfig(url, amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Dial:       amqp.DefaultDial(5 * time.Second),
		Properties: amqp.Table{"connection_name": "lameduck demo-worker"},
	})
}

// openAMQP connects the demo worker to RabbitMQ at --amqp, declares its
// quorum queue (and the dead-letter queue) with ldamqp.DeclareQueue, and
// returns the queue: an ldamqp.Source with a prefetch of --loops, and
// static epochs (RabbitMQ has no store for them). The closers it registers
// run in reverse: the Source's channels close, then the connection. On an
// error it undoes what it did.
func openAMQP(ctx context.Context, o workerOptions, lc *lameduck.Lifecycle, log *slog.Logger) (q demoQueue, err error) {
	var undo undoer
	defer undo.onError(&err)
	shown := health.Redact(o.amqpURL)
	conn, err := dialAMQP(o.amqpURL)
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: --amqp=%q: connecting to RabbitMQ: %w; start RabbitMQ there (rabbitmq-server -detached), or give its URL", shown, err)
	}
	undo = append(undo, func() { _ = conn.Close() })
	queue := amqpQueue(o.name, o.maxDeliver)
	if err := declareAMQP(conn, queue); err != nil {
		return q, demoErrorf("lameduck: demo-worker: --amqp=%q: %w", shown, err)
	}
	src, err := ldamqp.NewSource(conn, ldamqp.SourceConfig{
		Queue:    queue,
		Prefetch: o.loops, // one delivery per loop: no job waits in this runner's buffer while another runner idles
		Logger:   log,
		Redial:   func(context.Context) (*amqp.Connection, error) { return dialAMQP(o.amqpURL) },
	})
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: %w", err)
	}
	undo = append(undo, func() { _ = src.Close() })
	if err := lc.AddCloser("AMQP connection", func(context.Context) error { return conn.Close() }); err != nil {
		return q, err
	}
	// runs before the connection's closer: closers run in reverse
	if err := lc.AddCloser("AMQP source", func(context.Context) error { return src.Close() }); err != nil {
		return q, err
	}
	most, limit := queue.MaxDeliveries, queue.DeliveryLimit
	if most == 0 {
		most, limit = ldamqp.DefaultMaxDeliveries, ldamqp.DefaultDeliveryLimit
	}
	q.src = src
	q.epochs = worker.StaticEpochs(0)
	q.job = func(j worker.Job) *countedJob {
		aj := j.(*ldamqp.Job)
		return &countedJob{Job: aj, body: aj.Msg().Body}
	}
	q.attrs = []any{"amqp", shown, "amqp_queue", queue.Name, "dead_letter_queue", queue.DeadLetterQueue, "prefetch", o.loops,
		"max_deliveries", most, "delivery_limit", limit}
	return q, nil
}

// declareAMQP declares queue on a channel of its own, closed after, and
// says how to fix a queue that exists with other arguments.
func declareAMQP(conn *amqp.Connection, queue ldamqp.Queue) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	defer ch.Close()
	if err := ldamqp.DeclareQueue(ch, queue); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return fmt.Errorf("%w; with demo-worker: pass the --max-deliver it was declared with, or another --name (or rabbitmqctl delete_queue %s)",
				err, queue.Name)
		}
		return err
	}
	return nil
}

// enqueueAMQP publishes jobs to the queue of --name at --amqp, persistent,
// each job's id its message id, and waits for RabbitMQ to confirm every
// one. A queue that does not exist yet is declared with the demo's
// defaults (--max-deliver -1), as a runner started without --max-deliver
// declares it.
func enqueueAMQP(ctx context.Context, o workerOptions, jobs []demoJob) (string, error) {
	shown := health.Redact(o.amqpURL)
	fail := func(err error) (string, error) {
		return "", demoErrorf("lameduck: demo-worker enqueue: --amqp=%q: %w", shown, err)
	}
	conn, err := dialAMQP(o.amqpURL)
	if err != nil {
		return fail(fmt.Errorf("connecting to RabbitMQ: %w; start RabbitMQ there (rabbitmq-server -detached), or give its URL", err))
	}
	defer conn.Close()
	name := demoAMQPQueue(o.name)
	ch, err := conn.Channel()
	if err != nil {
		return fail(err)
	}
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
			return fail(fmt.Errorf("queue %s: %w", name, err))
		}
		// The 404 closed the channel.
		if err := declareAMQP(conn, amqpQueue(o.name, -1)); err != nil {
			return fail(err)
		}
		if ch, err = conn.Channel(); err != nil {
			return fail(err)
		}
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fail(err)
	}
	// RabbitMQ returns an unroutable message (the queue deleted meanwhile)
	// before it confirms it.
	returns := ch.NotifyReturn(make(chan amqp.Return, len(jobs)))
	confirms := make([]*amqp.DeferredConfirmation, 0, len(jobs))
	for _, j := range jobs {
		body, _ := json.Marshal(j)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false, amqp.Publishing{
			MessageId: j.ID, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body,
		})
		if err != nil {
			return fail(fmt.Errorf("publishing %s to queue %s: %w", j.ID, name, err))
		}
		confirms = append(confirms, dc)
	}
	for i, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil || !ok {
			return fail(fmt.Errorf("RabbitMQ did not confirm job %s in queue %s (%v): it may not be enqueued", jobs[i].ID, name, err))
		}
	}
	select {
	case r := <-returns:
		return fail(fmt.Errorf("RabbitMQ returned job %s as unroutable (%d %s): queue %s is gone; enqueue again", r.MessageId, r.ReplyCode, r.ReplyText, name))
	default:
	}
	return shown + " queue " + name, nil
}
