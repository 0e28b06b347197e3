package main

import (
	"context"

	connectrpc "connectrpc.com/connect"
	ldconnect "github.com/lameduck/lameduck/contrib/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// addConnect serves the routes and the Connect RPC service lameduck.demo.Demo
// (the procedures of the gRPC demo, demo_grpc.go: Slow and Ticks) on one
// net/http server (lameduck demo --server connect), with grpc.health.v1
// beside them: the Connect, gRPC and gRPC-Web protocols over HTTP/1.1 and
// h2c, on the port of the HTTP routes. A gRPC client, the kubelet's gRPC
// probe and a Connect client all call it there.
func (d *demo) addConnect(addr string) error {
	srv := ldconnect.New(d.lc)
	mux := d.httpMux()
	opts := srv.HandlerOptions()
	const slow, ticks = "/" + demoService + "/Slow", "/" + demoService + "/Ticks"
	mux.Handle(slow, connectrpc.NewUnaryHandler(slow,
		func(ctx context.Context, req *connectrpc.Request[durationpb.Duration]) (*connectrpc.Response[emptypb.Empty], error) {
			res, err := grpcSlow(ctx, req.Msg)
			if err != nil {
				return nil, connectrpc.NewError(connectrpc.CodeCanceled, err)
			}
			return connectrpc.NewResponse(res), nil
		}, opts...))
	mux.Handle(ticks, connectrpc.NewServerStreamHandler(ticks,
		func(ctx context.Context, _ *connectrpc.Request[emptypb.Empty], stream *connectrpc.ServerStream[timestamppb.Timestamp]) error {
			return grpcTicks(ctx, stream.Send)
		}, opts...))
	return srv.AddServer(demoHTTPServer(addr, mux), nil)
}
