package ldgrpc_test

import (
	"context"
	"log"
	"net/http"

	"github.com/lameduck/lameduck"
	ldgrpc "github.com/lameduck/lameduck/contrib/grpc"
	"github.com/lameduck/lameduck/health"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A gRPC server on :9000 beside the HTTP server on :8080, both drained by
// one shutdown sequence, with the health service that the kubelet's gRPC
// probe asks ("liveness" and "readiness"), and a readiness check of a
// service this one depends on.
func ExampleServer_AddServer() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	g := ldgrpc.New(lc)
	gs := grpc.NewServer(g.ServerOptions()...)
	// pb.RegisterGreeterServer(gs, &greeter{}) — the application's services.
	if err := g.AddServer(gs, ":9000", nil); err != nil {
		log.Fatal(err)
	}
	if err := lc.AddServer(&http.Server{Addr: ":8080"}, nil); err != nil {
		log.Fatal(err)
	}

	upstream, err := grpc.NewClient("upstream:9000", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	if err := lc.AddCheck(ldgrpc.HealthCheck(health.Check{Name: "upstream"}, upstream, "")); err != nil {
		log.Fatal(err)
	}
	_ = lc.AddCloser("upstream", func(context.Context) error { return upstream.Close() })
	// lc.Run(ctx) serves both servers, and drains both on SIGTERM.
}
