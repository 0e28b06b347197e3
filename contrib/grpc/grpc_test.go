package ldgrpc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldgrpc "github.com/lameduck/lameduck/contrib/grpc"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testService: UnaryCall sleeps ResponseSize milliseconds, ignoring its
// context (a slow call the drain must wait for), or blocks until release
// when ResponseSize is -1; StreamingOutputCall sends every 10ms until its
// context ends.
type testService struct {
	testpb.UnimplementedTestServiceServer
	release chan struct{}
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if req.GetResponseSize() < 0 {
		<-s.release
		return &testpb.SimpleResponse{}, nil
	}
	time.Sleep(time.Duration(req.GetResponseSize()) * time.Millisecond)
	return &testpb.SimpleResponse{Username: "done"}, nil
}

func (s *testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	for {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// served is a Lifecycle serving a gRPC server, and a client of it.
type served struct {
	lc      *lameduck.Lifecycle
	srv     *ldgrpc.Server
	svc     *testService
	cc      *grpc.ClientConn
	wait    func() error
	log     *testsupport.LogBuffer
	release func() // ends the UnaryCalls that wait (ResponseSize -1); safe to call twice
}

// serve starts lc (built by the caller) with a gRPC server on a free port.
func serve(t *testing.T, lc *lameduck.Lifecycle, logs *testsupport.LogBuffer) *served {
	t.Helper()
	s := &served{lc: lc, srv: ldgrpc.New(lc), svc: &testService{release: make(chan struct{})}, log: logs}
	gs := grpc.NewServer(s.srv.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, s.svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.srv.AddServer(gs, "", ln); err != nil {
		t.Fatal(err)
	}
	s.cc, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cc.Close() })
	s.release = sync.OnceFunc(func() { close(s.svc.release) })
	t.Cleanup(s.release)
	return s
}

// realLifecycle is a Lifecycle on the real clock (gRPC's own timers are
// real), with a short window and teardown.
func realLifecycle(t *testing.T, delay, teardown time.Duration, logs io.Writer) *lameduck.Lifecycle {
	t.Helper()
	lc, err := lameduck.New(lameduck.Config{ShutdownDelay: delay, ShutdownTeardown: teardown, IgnoreSignals: true,
		LookupEnv: func(string) (string, bool) { return "", false },
		Logger:    slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))})
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func check(t testing.TB, cc *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("Check(%q): %v", service, err)
	}
	return resp.GetStatus()
}

func wantStatus(t testing.TB, cc *grpc.ClientConn, when string, want map[string]healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for svc, st := range want {
		if got := check(t, cc, svc); got != st {
			t.Errorf("%s: Check(%q) = %s, want %s", when, svc, got, st)
		}
	}
}

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
	testSvc    = "grpc.testing.TestService"
)

// The health service through the phases (testsupport.HealthThroughThePhases):
// starting, serving, a critical check failing, SetServing, an unknown
// service, the signal, and a Watch stream told of each change.
//
// The Lifecycle runs on the fake clock, so the window lasts until the test
// ends it, however long the questions asked in it take; gRPC and the
// Watch's re-read keep their real timers.
func TestHealthThroughThePhases(t *testing.T) {
	type servingStatus = healthpb.HealthCheckResponse_ServingStatus
	testsupport.HealthThroughThePhases(t, func(lc *lameduck.Lifecycle, logs *testsupport.LogBuffer) testsupport.Health[servingStatus] {
		s := serve(t, lc, logs)
		return testsupport.Health[servingStatus]{
			Serving: serving, NotServing: notServing, Service: testSvc,
			Want: func(t testing.TB, when string, want map[string]servingStatus) {
				wantStatus(t, s.cc, when, want)
			},
			Check: func(t testing.TB, service string) error {
				_, err := healthpb.NewHealthClient(s.cc).Check(testsupport.Context(t, 10*time.Second), &healthpb.HealthCheckRequest{Service: service})
				return err
			},
			Watch: func(t testing.TB) func() (servingStatus, error) {
				// The stream's context is a hang guard: a Recv that never
				// returns fails when it ends.
				watch, err := healthpb.NewHealthClient(s.cc).Watch(testsupport.Context(t, 30*time.Second), &healthpb.HealthCheckRequest{Service: ""})
				if err != nil {
					t.Fatal(err)
				}
				return func() (servingStatus, error) {
					resp, err := watch.Recv()
					return resp.GetStatus(), err
				}
			},
			Code:       func(err error) uint32 { return uint32(status.Code(err)) },
			SetServing: s.srv.Health().SetServing,
		}
	})
}

// The health service follows the probe paths the Lifecycle was configured
// with, and SetServing false is honoured for "" and "readiness" as for any
// registered service.
func TestHealthFollowsRenamedPathsAndSetServing(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, err := lameduck.New(lameduck.Config{ShutdownDelay: 100 * time.Millisecond, ShutdownTeardown: 5 * time.Second, IgnoreSignals: true,
		LookupEnv: func(k string) (string, bool) {
			v, ok := map[string]string{"LAMEDUCK_READINESS_PATH": "/ready", "LAMEDUCK_LIVENESS_PATHS": "/live"}[k]
			return v, ok
		},
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, lc, logs)
	wait := lameducktest.Start(t, lc)
	wantStatus(t, s.cc, "serving, renamed paths", map[string]healthpb.HealthCheckResponse_ServingStatus{
		"": serving, "readiness": serving, "liveness": serving, testSvc: serving})
	for _, svc := range []string{"", "readiness"} {
		s.srv.Health().SetServing(svc, false)
		wantStatus(t, s.cc, "SetServing("+svc+", false)", map[string]healthpb.HealthCheckResponse_ServingStatus{svc: notServing, "liveness": serving})
		s.srv.Health().SetServing(svc, true)
		wantStatus(t, s.cc, "SetServing("+svc+", true)", map[string]healthpb.HealthCheckResponse_ServingStatus{svc: serving})
	}
	lc.BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// SIGTERM with RPCs in flight: a slow unary call completes, a server
// stream ends with Unavailable at the window's end, and the drain is
// clean.
func TestDrainLikeHTTP(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc := realLifecycle(t, 300*time.Millisecond, 10*time.Second, logs)
	s := serve(t, lc, logs)
	s.wait = lameducktest.Start(t, lc)
	client := testpb.NewTestServiceClient(s.cc)
	// The calls' contexts are hang guards: a stream or call the drain
	// never ends fails when they end.
	ctx := testsupport.Context(t, 30*time.Second)
	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	unary := make(chan error, 1)
	go func() {
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 1500})
		if err == nil && resp.GetUsername() != "done" {
			err = errors.New("no answer")
		}
		unary <- err
	}()
	inFlight(t, lc, 2) // the stream and the unary call
	lc.BeginShutdown("SIGTERM")
	var streamErr error
	for streamErr == nil {
		_, streamErr = stream.Recv()
	}
	if status.Code(streamErr) != codes.Unavailable {
		t.Fatalf("the stream ended with %v, want Unavailable", streamErr)
	}
	if err := testsupport.Recv(t, unary, "the slow unary call's answer"); err != nil {
		t.Fatalf("the slow unary call in flight: %v", err)
	}
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "every in-flight request finished") {
		t.Fatalf("the drain was not clean:\n%s", logs)
	}
}

// A call that outlives the budget is cut by Stop, and named.
func TestCutAtTheBudget(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc := realLifecycle(t, lameduck.NoDelay, time.Second, logs)
	s := serve(t, lc, logs)
	s.wait = lameducktest.Start(t, lc)
	unary := make(chan error, 1)
	ctx := testsupport.Context(t, 30*time.Second) // a hang guard
	go func() {
		_, err := testpb.NewTestServiceClient(s.cc).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: -1})
		unary <- err
	}()
	inFlight(t, lc, 1)
	lc.BeginShutdown("SIGTERM")
	if err := testsupport.Recv(t, unary, "the end of the call cut at the budget"); status.Code(err) != codes.Unavailable {
		t.Fatalf("the call cut at the budget: %v, want Unavailable", err)
	}
	if err := s.wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want a cut", err)
	}
	if !strings.Contains(logs.String(), "/grpc.testing.TestService/UnaryCall") {
		t.Fatalf("the cut call is not named:\n%s", logs)
	}
}

// inFlight waits until n requests are tracked in flight (10s at most).
func inFlight(t *testing.T, lc *lameduck.Lifecycle, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(lc.InFlight()) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d request(s) in flight after 10s, want %d", len(lc.InFlight()), n)
		}
	}
}

// HealthCheck asks another server's health service.
func TestHealthCheck(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc := realLifecycle(t, lameduck.NoDelay, 5*time.Second, logs)
	s := serve(t, lc, logs)
	s.wait = lameducktest.Start(t, lc)
	ctx := testsupport.Context(t, 10*time.Second) // a hang guard
	if err := ldgrpc.HealthCheck(health.Check{Name: "up"}, s.cc, "").Func(ctx); err != nil {
		t.Errorf("a SERVING server: %v", err)
	}
	if err := ldgrpc.HealthCheck(health.Check{Name: "up"}, s.cc, "nope").Func(ctx); status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Errorf("an unknown service: %v", err)
	}
	lc.BeginShutdown("test")
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := ldgrpc.HealthCheck(health.Check{Name: "up"}, s.cc, "").Func(tctx); err == nil {
		t.Error("a stopped server passed")
	}
	if ldgrpc.HealthCheck(health.Check{Name: "up"}, nil, "").Func(ctx) == nil {
		t.Error("a nil connection passed")
	}
}

// The health service's RPCs are probes, not application traffic, as HTTP
// probes are: an open Watch and a Check are never in flight, they do not
// keep the idle drain open (with no application RPC at all, the window ends
// at its 1s minimum, a Watch open and Checks asked throughout), and the
// Watch still ends at the window's end. Before, they were tracked like
// application RPCs: the Watch held the idle drain to DRAIN_TIMEOUT.
func TestHealthRPCsAreNotApplicationTraffic(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, clk := testsupport.NewLifecycle(t, lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: time.Second,
		IdleWindow: 2 * time.Second, DrainTimeout: 20 * time.Second, ShutdownTeardown: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))})
	s := serve(t, lc, logs)
	s.wait = lameducktest.Start(t, lc)
	ctx := testsupport.Context(t, 30*time.Second) // a hang guard
	watch, err := healthpb.NewHealthClient(s.cc).Watch(ctx, &healthpb.HealthCheckRequest{Service: ldgrpc.ServiceReadiness})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != serving {
		t.Fatalf("the Watch's first answer: %v, %v", first, err)
	}
	wantStatus(t, s.cc, "serving", map[string]healthpb.HealthCheckResponse_ServingStatus{ldgrpc.ServiceLiveness: serving, "": serving})
	if got := lc.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight() with a Watch open = %v; want none", got)
	}
	// Off the clock's first instant, which the idle drain could not tell
	// from no traffic at all: a Check counted as traffic would show.
	clk.Advance(100 * time.Millisecond)
	lc.BeginShutdown("SIGTERM")
	if st, err := watch.Recv(); err != nil || st.GetStatus() != notServing {
		t.Fatalf("the Watch at the signal: %v, %v", st, err)
	}
	wantStatus(t, s.cc, "in the window", map[string]healthpb.HealthCheckResponse_ServingStatus{ldgrpc.ServiceLiveness: serving, "": notServing})
	testsupport.Timers(t, clk, 1) // the window's
	clk.Advance(time.Second)
	testsupport.Await(t, lc.Events().WindowEnded)
	if a, _ := lc.Events().ShutdownInitiated.At(); !a.Add(time.Second).Equal(clk.Now()) {
		t.Fatalf("the window did not end at its 1s minimum")
	}
	for {
		if _, err = watch.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the Watch ended with %v at the window's end, want Unavailable", err)
	}
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
}

// In reject mode (SEND_RETRY_AFTER) the health service still answers while
// application RPCs are refused: "liveness" SERVING, readiness NOT_SERVING,
// as /healthz and /readyz do on HTTP. Before, a Check was refused
// Unavailable like an application RPC.
func TestHealthAnswersInRejectMode(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, err := lameduck.New(lameduck.Config{ShutdownDelay: lameduck.NoDelay, ShutdownTeardown: 10 * time.Second,
		SendRetryAfter: true, IgnoreSignals: true, LookupEnv: func(string) (string, bool) { return "", false },
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, lc, logs)
	s.wait = lameducktest.Start(t, lc)
	client := testpb.NewTestServiceClient(s.cc)
	ctx := testsupport.Context(t, 30*time.Second) // a hang guard
	slow := make(chan error, 1)
	go func() {
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: -1}) // until release
		slow <- err
	}()
	inFlight(t, lc, 1)
	lc.BeginShutdown("SIGTERM")
	testsupport.Await(t, lc.Events().WindowEnded)
	// The teardown waits for the slow call, refusing new ones.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "retry on another instance") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal in reject mode after 10s: %v", err)
		}
	}
	wantStatus(t, s.cc, "in reject mode", map[string]healthpb.HealthCheckResponse_ServingStatus{
		ldgrpc.ServiceLiveness: serving, ldgrpc.ServiceReadiness: notServing, "": notServing})
	s.release()
	if err := testsupport.Recv(t, slow, "the slow call's answer"); err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
}
