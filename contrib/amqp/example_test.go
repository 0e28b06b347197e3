package ldamqp_test

import (
	"context"
	"log"

	"github.com/lameduck/lameduck"
	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/health"
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
