module github.com/lameduck/lameduck/bench

go 1.26

require (
	github.com/alexliesenfeld/health v0.8.0
	github.com/hellofresh/health-go/v5 v5.5.4
	github.com/lameduck/lameduck v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

require (
	go.opentelemetry.io/otel v1.35.0 // indirect
	go.opentelemetry.io/otel/trace v1.35.0 // indirect
)

replace github.com/lameduck/lameduck => ../
