module github.com/lameduck/lameduck/contrib/connect

go 1.26.0

replace github.com/lameduck/lameduck => ../..

require (
	connectrpc.com/connect v1.21.1
	connectrpc.com/grpchealth v1.5.0
	github.com/lameduck/lameduck v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.11
)
