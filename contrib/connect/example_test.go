package ldconnect_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/lameduck/lameduck"
	ldconnect "github.com/lameduck/lameduck/contrib/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A Connect service on :8080, answering the Connect, gRPC and gRPC-Web
// protocols over HTTP/1.1 and cleartext HTTP/2, with the grpc.health.v1
// service the kubelet's gRPC probe asks ("liveness" and "readiness") and
// the HTTP probes on the same port; SIGTERM drains it.
func ExampleServer_AddServer() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	srv := ldconnect.New(lc)
	mux := http.NewServeMux()
	// The application's handlers, each given srv.HandlerOptions(); with
	// generated code: mux.Handle(pingv1connect.NewPingServiceHandler(svc, srv.HandlerOptions()...)).
	const greet = "/greet.v1.GreetService/Greet"
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
		}, srv.HandlerOptions()...))
	if err := srv.AddServer(&http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}, nil); err != nil {
		log.Fatal(err)
	}
	// if err := lc.Run(ctx); err != nil { os.Exit(1) } serves it, and drains it on SIGTERM.
}
