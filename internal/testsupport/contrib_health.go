package testsupport

import (
	"context"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// The gRPC status codes the health scenario expects, as numbers: grpc-go's
// codes.Code and Connect's connect.Code both number them so.
const (
	codeNotFound    = 5
	codeUnavailable = 14
)

// Health is a grpc.health.v1 service under test (the gRPC and Connect
// integrations'), as [HealthThroughThePhases] asks it through the
// integration's own client; S is that client's serving status.
type Health[S comparable] struct {
	// Serving and NotServing are the statuses SERVING and NOT_SERVING.
	Serving, NotServing S
	// Service is a service of the application's own, set SERVING.
	Service string
	// Want fails t (t.Errorf) unless a Check of each service of want
	// answers its status; when names the step.
	Want func(t testing.TB, when string, want map[string]S)
	// Check asks for the status of service and returns the call's error.
	Check func(t testing.TB, service string) error
	// Watch opens a Watch of the server as a whole (service ""), under a
	// hang guard, and returns its next update: the status, or the error
	// that ended the stream.
	Watch func(t testing.TB) (next func() (S, error))
	// Code returns the gRPC status code of err (codes.Code, connect.Code).
	Code func(err error) uint32
	// SetServing is the integration's Health().SetServing.
	SetServing func(service string, serving bool)
}

// HealthThroughThePhases makes a [Phases], has serve register the
// integration's server on its Lifecycle (logging to logs) and return its
// health service, runs the Lifecycle and takes the service through every
// phase: starting (the server NOT_SERVING, liveness SERVING, an unknown
// service NotFound), serving, the critical check failing and back,
// SetServing, and the signal, from which every service but liveness is
// NOT_SERVING for good, SetServing true included. A Watch of the server is
// told of each change, is no request in flight (a probe), and ends with
// Unavailable at the window's end, which the test takes the Lifecycle to
// on the fake clock; then Run must return nil.
func HealthThroughThePhases[S comparable](t *testing.T, serve func(lc *lameduck.Lifecycle, logs *LogBuffer) Health[S]) {
	t.Helper()
	p := NewPhases(t)
	h := serve(p.LC, p.Logs)
	serving, notServing, svc := h.Serving, h.NotServing, h.Service
	runErr := make(chan error, 1)
	go func() { runErr <- p.LC.Run(context.Background()) }()

	// Starting: ask until the server answers, for Guard at the most.
	deadline := time.Now().Add(Guard)
	err := h.Check(t, "nope")
	for h.Code(err) != codeNotFound && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		err = h.Check(t, "nope")
	}
	if h.Code(err) != codeNotFound {
		t.Errorf("Check(nope): %v, want NotFound", err)
	}
	h.Want(t, "starting", map[string]S{"": notServing, "readiness": notServing, "liveness": serving, svc: notServing})
	watch := h.Watch(t)
	next := func(want S) {
		t.Helper()
		got, err := watch()
		if err != nil || got != want {
			t.Fatalf("Watch: %v %v, want %v", got, err, want)
		}
	}
	next(notServing)
	if got := p.LC.InFlight(); len(got) != 0 {
		t.Errorf("in flight with a Watch open: %v; want none (health calls are probes)", got)
	}

	// Serving.
	close(p.Boot)
	next(serving)
	h.Want(t, "serving", map[string]S{"": serving, "readiness": serving, "liveness": serving, svc: serving})
	p.Failing.Store(true)
	h.Want(t, "a critical check fails", map[string]S{"": notServing, "readiness": notServing, "liveness": serving, svc: notServing})
	next(notServing) // within the Watch's re-read
	p.Failing.Store(false)
	next(serving)
	h.SetServing(svc, false)
	h.Want(t, "SetServing false", map[string]S{"": serving, svc: notServing})
	h.SetServing(svc, true)

	// The signal: NOT_SERVING for all but liveness, for good.
	p.LC.BeginShutdown("SIGTERM")
	next(notServing)
	h.SetServing(svc, true)
	h.Want(t, "draining", map[string]S{"": notServing, "readiness": notServing, "liveness": serving, svc: notServing})
	if p.LC.Events().WindowEnded.Fired() {
		t.Fatal("the window ended before the test ended it")
	}
	// The window's end ends the Watch stream with Unavailable.
	lameducktest.EndWindow(t, p.LC, p.Clk)
	if _, err := watch(); h.Code(err) != codeUnavailable {
		t.Fatalf("Watch at the window's end: %v, want Unavailable", err)
	}
	if err := Recv(t, runErr, "Run's return"); err != nil {
		t.Fatal(err)
	}
}
