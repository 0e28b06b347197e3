module github.com/lameduck/lameduck/contrib/amqp

go 1.26

replace github.com/lameduck/lameduck => ../..

require (
	github.com/lameduck/lameduck v0.0.0
	github.com/rabbitmq/amqp091-go v1.16.0
	go.uber.org/goleak v1.3.0
)
