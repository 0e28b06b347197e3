// Package ldgrpc serves a gRPC server (google.golang.org/grpc) under a
// lameduck Lifecycle, drained like an HTTP server, with a gRPC health
// service (grpc.health.v1) that tells the truth in every phase; and it
// checks another service's gRPC health as a readiness check.
//
// Import it as
//
//	import ldgrpc "github.com/lameduck/lameduck/contrib/grpc"
//
// It is a module of its own, so importing it pulls gRPC and nothing else
// beyond lameduck's standard-library core. The operator's page is
// docs/grpc.md in the lameduck repository.
//
// The sequence for a gRPC server, beside the HTTP servers and under the
// same budget (see lameduck.Lifecycle.AddServerFuncs):
//
//  1. starting: the health service answers NOT_SERVING for every service
//     but "liveness";
//  2. serving: SERVING, with "readiness" (and "" and every registered
//     service) following /readyz: NOT_SERVING while a critical check
//     fails;
//  3. the signal: NOT_SERVING for every service but "liveness", for good;
//     Watch streams are sent the change; RPCs are still served through the
//     lame-duck window, so clients that have not yet learned of the
//     endpoint's removal are answered;
//  4. the window's end: server-streaming and bidirectional RPCs have their
//     context cancelled and end with codes.Unavailable ("reconnect to
//     another instance"); GracefulStop sends GOAWAY and waits for the
//     unary RPCs in flight;
//  5. the budget: Stop closes what is left, and the RPCs cut are named in
//     the log (method and age), as HTTP requests are.
package ldgrpc

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/rpcserve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Server ties gRPC servers to one Lifecycle: its interceptors track every
// application RPC and end streams at the window's end, and its health
// service answers grpc.health.v1 from the Lifecycle's phase and readiness
// checks. The health service's own RPCs (Check, Watch, List) are probes,
// not application traffic, as HTTP probes are
// (docs/probes-and-shutdown.md): they are not counted in flight
// (Lifecycle.InFlight), do not keep the idle drain (DrainIdle) open, are
// never named as cut, and are answered in reject mode
// (Config.SendRetryAfter); a Watch stream still ends at the window's end.
//
// Create one with [New], pass [Server.ServerOptions] to grpc.NewServer and
// register the server with [Server.AddServer]. Its methods are safe for
// concurrent use.
type Server struct {
	lc     *lameduck.Lifecycle
	health *Health
}

// New returns a Server for lc.
func New(lc *lameduck.Lifecycle) *Server {
	return &Server{lc: lc, health: newHealth(lc)}
}

// Health returns the health service the Server registers on every
// grpc.Server given to AddServer.
func (s *Server) Health() *Health { return s.health }

// ServerOptions returns the options a grpc.Server needs to be drained:
// a unary and a stream interceptor, chained before any of the caller's
// (grpc.ChainUnaryInterceptor, grpc.ChainStreamInterceptor). Pass them to
// grpc.NewServer:
//
//	gs := grpc.NewServer(append(srv.ServerOptions(), yourOptions...)...)
//
// With the Lifecycle's Config.MaxConnectionAge set (LAMEDUCK_MAX_CONNECTION_AGE),
// they also set grpc-go's keepalive.ServerParameters.MaxConnectionAge to it:
// gRPC sends GOAWAY to a connection that old (grpc-go adds its own ±10%
// jitter), and the RPCs on it run to their end (MaxConnectionAgeGrace is
// left infinite). A grpc.KeepaliveParams of your own, later in the list,
// replaces this one: set MaxConnectionAge in it then.
func (s *Server) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	}
	if age := s.lc.Config().MaxConnectionAge; age > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age}))
	}
	return opts
}

// AddServer registers gs with the Lifecycle, to be bound, served and
// stopped by Run in the shutdown sequence, and registers the health service
// on it (grpc.health.v1.Health; do not register another). gs must have been
// created with ServerOptions. If ln is nil, Run binds addr (":9000") over
// TCP. The verb and the order of the arguments are those of every server
// integration (the server, its address, a listener); the Lifecycle is the
// one New was given, since the interceptors, passed to grpc.NewServer
// before gs exists, and the health service, shared by every grpc.Server of
// the Lifecycle, need it first.
//
// Teardown, beside the HTTP drain and under the same budget: the listener
// closes, GracefulStop sends GOAWAY and waits for the RPCs in flight
// (streams have been ended at the window's end); when the budget is spent,
// Stop closes every connection, which cancels the RPCs still running, and
// they are named in the log. Like net/http's Close, this does not wait for
// a handler that ignores its cancelled context: it is left running (gRPC's
// Stop waits for it in a goroutine of its own) and the process exits
// without it. Do not call gs.Serve, GracefulStop or Stop yourself.
//
// AddServer returns the error of lameduck.Lifecycle.AddServerFuncs
// (an error once Run has started, a missing address).
func (s *Server) AddServer(gs *grpc.Server, addr string, ln net.Listener) error {
	if gs == nil {
		return errors.New("lameduck: ldgrpc.Server.AddServer: the *grpc.Server is nil; pass the server created with ServerOptions")
	}
	var mu sync.Mutex
	var stopped chan struct{} // closed when GracefulStop returns
	err := s.lc.AddServerFuncs(lameduck.ServerFuncs{
		Name:  "grpc",
		Addr:  addr,
		Serve: gs.Serve,
		Shutdown: func(ctx context.Context) error {
			done := make(chan struct{})
			mu.Lock()
			stopped = done
			mu.Unlock()
			go func() { defer close(done); gs.GracefulStop() }()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Close: func() error {
			// Stop closes the listeners and every connection at once,
			// which cancels every RPC's context, then waits for the
			// handlers to return: one that ignores its context would hold
			// the teardown, so the wait is left to a goroutine, as
			// net/http's Close leaves such handlers running.
			stopDone := make(chan struct{})
			go func() { defer close(stopDone); gs.Stop() }()
			mu.Lock()
			graceful := stopped // GracefulStop waits for the handlers too
			mu.Unlock()
			if graceful == nil {
				graceful = stopDone
			}
			timer := time.NewTimer(stopWait)
			defer timer.Stop()
			for _, ch := range []chan struct{}{stopDone, graceful} {
				select {
				case <-ch:
				case <-timer.C:
					return nil
				}
			}
			return nil
		},
	}, ln)
	if err != nil {
		return err
	}
	healthpb.RegisterHealthServer(gs, s.health)
	s.health.add(gs)
	return nil
}

// stopWait bounds how long Close waits for the handlers Stop cancelled to
// return: a handler that honours its context returns at once.
const stopWait = 100 * time.Millisecond

// errRefused is the status of an RPC that arrives when the Lifecycle
// refuses new work.
func refused(msg string) error { return status.Error(codes.Unavailable, msg) }

// endedAtDrain is the status of a stream ended at the window's end.
var endedAtDrain = status.Error(codes.Unavailable, "lameduck: the server is shutting down; reconnect to another instance")

// healthPrefix begins the full method name of every RPC of the health
// service (grpc.health.v1.Health: Check, Watch, List), which AddServer
// registers on every grpc.Server it serves.
var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// isProbe reports whether method is one of the health service's: a probe
// (the kubelet's gRPC probe, grpc-health-probe, client-side health
// checking), which, like an HTTP probe, is not application traffic: never
// tracked, so it neither holds the idle drain nor the teardown and is never
// named as cut, and never refused in reject mode.
func isProbe(method string) bool { return strings.HasPrefix(method, healthPrefix) }

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isProbe(info.FullMethod) {
		return handler(ctx, req)
	}
	tr, v := s.lc.TrackRequest("POST", info.FullMethod, false)
	if v.Refuse != "" {
		return nil, refused(v.Refuse)
	}
	defer tr.End()
	return handler(ctx, req)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !isProbe(info.FullMethod) { // a Watch is a probe: untracked, but ended at the window's end too
		tr, v := s.lc.TrackRequest("POST", info.FullMethod, false)
		if v.Refuse != "" {
			return refused(v.Refuse)
		}
		defer tr.End()
	}
	if !info.IsServerStream {
		// Client streams end when their client stops sending; the
		// teardown's budget bounds them.
		return handler(srv, ss)
	}
	// At the window's end the handler's context ends, and the client is
	// told to go elsewhere, whatever the handler returns.
	return rpcserve.UntilWindowEnd(ss.Context(), s.lc, func(ctx context.Context) error {
		return handler(srv, &drainStream{ServerStream: ss, ctx: ctx})
	}, func() error { return endedAtDrain })
}

// drainStream is a ServerStream whose context also ends at the window's
// end.
type drainStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *drainStream) Context() context.Context { return s.ctx }
