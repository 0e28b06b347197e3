package ldgrpc

import (
	"context"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/rpcserve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The service names of the health service that answer like the HTTP
// probes, for the kubelet's native gRPC probe, whose service field lets
// liveness and readiness ask different questions
// (https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#define-a-grpc-liveness-probe).
const (
	// ServiceLiveness answers as /healthz: SERVING while the process
	// serves, drain included.
	ServiceLiveness = "liveness"
	// ServiceReadiness answers as /readyz: SERVING only while the phase is
	// serving and no critical check or gate fails. The empty service name
	// "" (the server as a whole, grpc-health-probe's default) answers the
	// same, and so does every service registered on the grpc.Server.
	ServiceReadiness = "readiness"
)

// watchEvery is how often a Watch stream re-reads readiness while
// serving, so a check that starts or stops failing is told within it.
const watchEvery = 2 * time.Second

// Health is the grpc.health.v1 Health service of a [Server], owned by the
// Lifecycle: its answers come from the Lifecycle's probes, so the gRPC
// health of a service never disagrees with /healthz and /readyz.
//
//   - "liveness": /healthz's answer (200 → SERVING).
//   - "", "readiness" and every service registered on a grpc.Server the
//     Server serves: /readyz's answer — NOT_SERVING while starting, SERVING
//     while serving unless a critical check or gate fails, NOT_SERVING from
//     the shutdown signal on, for good; a service marked with SetServing
//     false answers NOT_SERVING while it is so marked.
//   - any other name: Check fails with codes.NotFound, Watch sends
//     SERVICE_UNKNOWN (the protocol's rules:
//     https://github.com/grpc/grpc/blob/master/doc/health-checking.md).
//
// Watch sends the status at once, then each change: at the end of the
// boot, at the signal, on SetServing, and on a change of readiness seen by
// a re-read every 2s while serving. Watch streams end with
// codes.Unavailable at the end of the lame-duck window, as every server
// stream does. Its methods are safe for concurrent use.
type Health struct {
	healthpb.UnimplementedHealthServer
	lc    *lameduck.Lifecycle
	marks *rpcserve.Marks // what SetServing was told

	mu      sync.Mutex
	servers []*grpc.Server // guarded by mu
}

func newHealth(lc *lameduck.Lifecycle) *Health {
	return &Health{lc: lc, marks: rpcserve.NewMarks()}
}

func (h *Health) add(gs *grpc.Server) {
	h.mu.Lock()
	h.servers = append(h.servers, gs)
	h.mu.Unlock()
}

// SetServing marks service (a name registered on the grpc.Server, or any
// name the application wants to answer for) as serving or not, and tells
// the Watch streams. A service marked serving still answers NOT_SERVING
// whenever readiness fails; from the shutdown signal on every service
// answers NOT_SERVING, whatever SetServing says later (the rule of grpc-go's
// health.Server.Shutdown).
func (h *Health) SetServing(service string, serving bool) { h.marks.Set(service, serving) }

// known reports whether service is registered on a served grpc.Server or
// was named by SetServing, and whether it is marked down.
func (h *Health) known(service string) (known, down bool) {
	if known, down, _ := h.marks.Lookup(service); known {
		return true, down
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, gs := range h.servers {
		if _, ok := gs.GetServiceInfo()[service]; ok {
			return true, false
		}
	}
	return false, false
}

// status answers for service; ok false means unknown.
func (h *Health) status(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	switch service {
	case ServiceLiveness:
	case "", ServiceReadiness:
		if _, down := h.known(service); down && h.lc.Phase() == lameduck.PhaseServing {
			return healthpb.HealthCheckResponse_NOT_SERVING, true
		}
	default:
		known, down := h.known(service)
		if !known {
			return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, false
		}
		if down && h.lc.Phase() == lameduck.PhaseServing {
			return healthpb.HealthCheckResponse_NOT_SERVING, true
		}
	}
	// rpcserve.ProbeOK asks the paths the Lifecycle was configured with
	// (LAMEDUCK_READINESS_PATH, LAMEDUCK_LIVENESS_PATHS), not the
	// defaults: gRPC and HTTP health must never disagree.
	if rpcserve.ProbeOK(ctx, h.lc, service == ServiceLiveness) {
		return healthpb.HealthCheckResponse_SERVING, true
	}
	return healthpb.HealthCheckResponse_NOT_SERVING, true
}

// Check answers one health question (grpc.health.v1.Health/Check).
func (h *Health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, ok := h.status(ctx, req.GetService())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// Watch streams a service's status (grpc.health.v1.Health/Watch): the
// current one at once, then each change.
func (h *Health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx := stream.Context()
	wakes := h.marks.Wakes(h.lc, req.GetService(), watchEvery)
	defer wakes.Stop()
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	for {
		st, _ := h.status(ctx, req.GetService())
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		if !wakes.Next(ctx.Done()) {
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// List answers the status of every service the health service knows
// (grpc.health.v1.Health/List): "", "liveness", "readiness", the services
// registered on the served grpc.Servers and those named by SetServing.
func (h *Health) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	names := map[string]bool{"": true, ServiceLiveness: true, ServiceReadiness: true}
	for _, name := range h.marks.Names() {
		names[name] = true
	}
	h.mu.Lock()
	for _, gs := range h.servers {
		for name := range gs.GetServiceInfo() {
			names[name] = true
		}
	}
	h.mu.Unlock()
	resp := &healthpb.HealthListResponse{Statuses: make(map[string]*healthpb.HealthCheckResponse, len(names))}
	for name := range names {
		st, _ := h.status(ctx, name)
		resp.Statuses[name] = &healthpb.HealthCheckResponse{Status: st}
	}
	return resp, nil
}
