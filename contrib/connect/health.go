package ldconnect

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/rpcserve"
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
	// same.
	ServiceReadiness = "readiness"
)

// watchEvery is how often a Watch stream re-reads readiness, so a check
// that starts or stops failing is told within it.
const watchEvery = 2 * time.Second

// Health is the grpc.health.v1 service of a [Server] (a
// connectrpc.com/grpchealth Checker and Watcher), owned by the Lifecycle:
// its answers come from the Lifecycle's probes, so the gRPC health of a
// service never disagrees with /healthz and /readyz.
//
//   - "liveness": /healthz's answer (200 → SERVING).
//   - "", "readiness" and every service named by SetServing: /readyz's
//     answer — NOT_SERVING while starting, SERVING while serving unless a
//     critical check or gate fails, NOT_SERVING from when /readyz turns
//     503 in the shutdown sequence (lameduck.Config.NotReadyAt: the signal
//     or the teardown) on, for good; a service marked with SetServing false answers
//     NOT_SERVING while it is so marked.
//   - any other name: connect.CodeNotFound, as the protocol asks
//     (https://github.com/grpc/grpc/blob/master/doc/health-checking.md).
//
// A readiness question runs the readiness checks as a /readyz probe does,
// sharing their pings, under the call's deadline. Watch sends the status at
// once, then each change: at the end of the boot, at the signal, on
// SetServing, and on a change seen by a re-read every 2s; a Watch stream
// ends with connect.CodeUnavailable at the end of the lame-duck window, as
// every server stream does. Its methods are safe for concurrent use.
type Health struct {
	lc    *lameduck.Lifecycle
	marks *rpcserve.Marks // what SetServing was told
}

func newHealth(lc *lameduck.Lifecycle) *Health {
	return &Health{lc: lc, marks: rpcserve.NewMarks()}
}

// SetServing names service (such as "acme.ping.v1.PingService") to the
// health service and marks it serving or not, and tells the Watch streams.
// A service marked serving still answers NOT_SERVING whenever readiness
// fails; once /readyz has turned 503 in the shutdown sequence every service
// but "liveness" answers NOT_SERVING, whatever SetServing says later (the rule of grpc-go's
// health.Server.Shutdown). Marking "liveness" has no effect on its answer.
func (h *Health) SetServing(service string, serving bool) { h.marks.Set(service, serving) }

// Check answers one health question (grpc.health.v1.Health/Check), as
// [Health] describes. It returns a connect.CodeNotFound error for a service
// it does not know.
func (h *Health) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	known, down, _ := h.marks.Lookup(req.Service)
	liveness := false
	switch req.Service {
	case ServiceLiveness:
		liveness, down = true, false
	case "", ServiceReadiness:
	default:
		if !known {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
		}
	}
	// rpcserve.ProbeOK asks the paths the Lifecycle was configured with
	// (LAMEDUCK_READINESS_PATH, LAMEDUCK_LIVENESS_PATHS), not the
	// defaults: gRPC and HTTP health must never disagree.
	if down || !rpcserve.ProbeOK(ctx, h.lc, liveness) {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// Watch arranges for onChange to be called whenever the status of req's
// service may have changed (grpc.health.v1.Health/Watch, through
// grpchealth's handler, which re-asks Check): at the end of the boot, at
// the shutdown signal, on SetServing, and every 2s. It returns a
// connect.CodeNotFound error for a service it does not know. The goroutine
// it starts calls onChange and returns when stop is called; stop waits for
// it.
func (h *Health) Watch(_ context.Context, req *grpchealth.CheckRequest, onChange func()) (stop func(), err error) {
	switch req.Service {
	case "", ServiceLiveness, ServiceReadiness:
	default:
		if known, _, _ := h.marks.Lookup(req.Service); !known {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
		}
	}
	wakes := h.marks.Wakes(h.lc, req.Service, watchEvery)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer wakes.Stop()
		for wakes.Next(quit) {
			onChange()
		}
	})
	return sync.OnceFunc(func() { close(quit); wg.Wait() }), nil
}
