package ldamqp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/lameduck/lameduck"
	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// A degraded check of the broker with a connection of its own: while
// RabbitMQ is down /readyz stays 200 "degraded" (the service can still
// answer reads), and the check redials once the broker is back.
func ExampleDialCheck() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	check, closeCheck := ldamqp.DialCheck(health.Check{Name: "broker"}, "amqp://guest:guest@127.0.0.1:5672/", amqp.Config{})
	if err := lc.AddCheck(check); err != nil {
		log.Fatal(err)
	}
	_ = lc.AddCloser("amqp check", func(context.Context) error { return closeCheck() })
}

// A runner that runs four jobs at once from a RabbitMQ quorum queue: four
// loops on one Source whose prefetch is four. A job that fails three times
// goes to the dead-letter queue; SIGTERM drains the runner (docs/amqp.md,
// "Runners"). It needs a broker, so it is compiled and not run.
func ExampleNewSource() {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	dial := func() (*amqp.Connection, error) {
		// No Config.Recovery: the Source redials itself (SourceConfig.Redial).
		return amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	}
	conn, err := dial()
	if err != nil {
		log.Fatal(err)
	}
	queue := ldamqp.Queue{
		Name:            "thumbnails",
		MaxDeliveries:   3, // a failing job runs 3 times, then is dead-lettered
		DeadLetterQueue: "thumbnails.dead",
		// Above the longest job and the drain bound (RabbitMQ 3.11.15, 3.12 and later).
		Arguments: amqp.Table{"x-consumer-timeout": (9 * time.Hour).Milliseconds()},
	}
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if err := ldamqp.DeclareQueue(ch, queue); err != nil {
		log.Fatal(err) // RabbitMQ's reason names an argument that differs
	}
	_ = ch.Close()

	const loops = 4
	src, err := ldamqp.NewSource(conn, ldamqp.SourceConfig{
		Queue:    queue,
		Prefetch: loops, // one delivery per loop: none waits in this runner while another idles
		Redial:   func(context.Context) (*amqp.Connection, error) { return dial() },
	})
	if err != nil {
		log.Fatal(err)
	}

	w, err := worker.New(worker.Config{}) // LAMEDUCK_* fill the settings
	if err != nil {
		log.Fatal(err)
	}
	// Closers run after the loops have returned and the Source is drained.
	_ = w.Lifecycle().AddCloser("amqp source", func(context.Context) error { return src.Close() })
	_ = w.Lifecycle().AddCloser("amqp connection", func(context.Context) error { return conn.Close() })
	for i := range loops {
		err := w.AddLoop(worker.Loop{
			Name:   fmt.Sprintf("thumbnails-%d", i),
			Source: src,
			Handle: func(ctx context.Context, job worker.Job) error {
				msg := job.(*ldamqp.Job).Msg() // body, properties, headers
				return makeThumbnail(ctx, msg.Body)
			},
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// makeThumbnail stands for the application's work: it returns when ctx
// ends (the drain bound, or the signal in mode interrupt).
func makeThumbnail(ctx context.Context, image []byte) error {
	_ = image
	return ctx.Err()
}
