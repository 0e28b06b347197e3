package main

import (
	"context"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/cmd/lameduck/internal/ctxtime"
	ldgrpc "github.com/lameduck/lameduck/contrib/grpc"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The demo's gRPC service, lameduck.demo.Demo, written by hand on
// protobuf's well-known types so the demo needs no generated code:
//
//	rpc Slow(google.protobuf.Duration) returns (google.protobuf.Empty);             // answers after the duration (at most 10m)
//	rpc Ticks(google.protobuf.Empty) returns (stream google.protobuf.Timestamp);    // a timestamp every 100ms until the call ends
//
// With grpcurl: grpcurl -plaintext -d '"3s"' localhost:9000 lameduck.demo.Demo/Slow
// (grpcurl needs the descriptors: pass -proto, or use grpc-health-probe for
// the health service, which is always there).
const demoService = "lameduck.demo.Demo"

var demoServiceDesc = grpc.ServiceDesc{
	ServiceName: demoService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Slow",
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(durationpb.Duration)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) { return grpcSlow(ctx, req.(*durationpb.Duration)) }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/" + demoService + "/Slow"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Ticks",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			if err := stream.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			return grpcTicks(stream.Context(), func(ts *timestamppb.Timestamp) error { return stream.SendMsg(ts) })
		},
	}},
}

// grpcSlow answers after d, or when the call is cancelled.
func grpcSlow(ctx context.Context, d *durationpb.Duration) (*emptypb.Empty, error) {
	if err := ctxtime.Sleep(ctx, min(d.AsDuration(), maxSlow)); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// grpcTicks sends the time every 100ms, the first at once, until ctx ends
// (and returns its error) or a send fails (and returns that error).
func grpcTicks(ctx context.Context, send func(*timestamppb.Timestamp) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := send(timestamppb.Now()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// addGRPC serves the demo's gRPC service and the health service on addr,
// drained with the HTTP server.
func addGRPC(lc *lameduck.Lifecycle, addr string) error {
	g := ldgrpc.New(lc)
	gs := grpc.NewServer(g.ServerOptions()...)
	gs.RegisterService(&demoServiceDesc, struct{}{})
	return g.AddServer(gs, addr, nil)
}
