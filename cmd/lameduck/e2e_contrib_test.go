package main

// End-to-end tests of the contrib integrations on the real `lameduck demo`
// binary: the gRPC server (--grpc-addr) asked by the real grpc-health-probe
// and drained by SIGTERM, /metrics parsed by the Prometheus text parser,
// and the --check-postgres/-mysql/-redis/-nats/-amqp checks against this
// machine's servers.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// grpcHealthProbe is the version of grpc-health-probe the tests build
// from the module proxy: the tool Kubernetes users ran before the
// kubelet's native gRPC probe, and still run from exec probes.
const grpcHealthProbe = "github.com/grpc-ecosystem/grpc-health-probe@v0.4.63"

var (
	probeOnce sync.Once
	probeBin  string
	probeErr  error
)

// healthProbeBin builds grpc-health-probe once per test binary.
func healthProbeBin(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "grpc-health-probe-")
		if err != nil {
			probeErr = err
			return
		}
		cmd := exec.Command("go", "install", grpcHealthProbe)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			probeErr = errors.New("go install " + grpcHealthProbe + ": " + err.Error() + "\n" + string(out))
			return
		}
		probeBin = filepath.Join(dir, "grpc-health-probe")
	})
	if probeErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(probeErr)
		}
		t.Skip(probeErr)
	}
	return probeBin
}

// awaitInFlight polls p's lameduck_requests_in_flight gauge until it
// reads n or more (what names them, for the failure), or fails t after
// reqTimeout.
func awaitInFlight(t *testing.T, p *proc, n int, what string) {
	t.Helper()
	for deadline := time.Now().Add(reqTimeout); ; time.Sleep(pollEvery) {
		m := scrapeGauge(t, p, "lameduck_requests_in_flight")
		if m >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lameduck_requests_in_flight is %v after %s; want %d (%s) before SIGTERM", m, reqTimeout, n, what)
		}
	}
}

// sigtermThenProbe sends p SIGTERM, waits for its "lameduck: draining"
// line, and asks grpc-health-probe (bin) at addr: the service readiness
// names ("" for the server's overall status) must answer NOT_SERVING, and
// "liveness" SERVING.
func sigtermThenProbe(t *testing.T, p *proc, bin, addr, readiness string) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	p.waitLog(`"lameduck: draining"`, startTimeout, msgContains("lameduck: draining"))
	if code, out := healthProbe(t, bin, addr, readiness); code == 0 {
		t.Errorf("grpc-health-probe -service %q after SIGTERM: exit 0 (%s), want NOT_SERVING", readiness, out)
	}
	if code, out := healthProbe(t, bin, addr, "liveness"); code != 0 {
		t.Errorf("grpc-health-probe -service liveness after SIGTERM: exit %d: %s, want SERVING", code, out)
	}
}

// healthProbe runs grpc-health-probe against addr for service and returns
// its exit code (0 SERVING, 4 NOT_SERVING: the tool's documented codes).
func healthProbe(t *testing.T, bin, addr, service string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-addr", addr, "-service", service, "-connect-timeout", "5s", "-rpc-timeout", "5s").CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("grpc-health-probe: %v", err)
	}
	code := 0
	if ee != nil {
		code = ee.ExitCode()
	}
	return code, strings.TrimSpace(string(out))
}

// grpcAddr is the address of the demo's gRPC listener, from its log.
func (p *proc) grpcAddr() string {
	p.t.Helper()
	l := p.waitLog("the gRPC listening line", startTimeout, func(l logLine) bool {
		return l.msg() == "lameduck: listening" && l.rec["server"] == "grpc"
	})
	addr, _ := l.rec["addr"].(string)
	return addr
}

// The demo's gRPC server answers grpc-health-probe truthfully and is
// drained like HTTP on SIGTERM: NOT_SERVING at once (liveness still
// SERVING), a slow unary call in flight completes, a server stream ends
// with Unavailable at the window's end, and the process exits 0. Its
// /metrics parses.
//
// Two grpc-health-probe processes are started after the signal and must
// connect before the window ends (the gRPC listener closes then): the 4s
// window leaves seconds of margin for process starts on a loaded machine;
// the slow call (5s) still outlives it.
func TestE2EGRPCAndMetrics(t *testing.T) {
	bin := healthProbeBin(t)
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "4s"), "--grpc-addr", "127.0.0.1:0")
	addr := p.grpcAddr()
	for _, svc := range []string{"", "liveness", "readiness", "lameduck.demo.Demo"} {
		if code, out := healthProbe(t, bin, addr, svc); code != 0 {
			t.Fatalf("grpc-health-probe -service %q while serving: exit %d: %s", svc, code, out)
		}
	}
	if code, out := healthProbe(t, bin, addr, "nope"); code == 0 {
		t.Fatalf("grpc-health-probe -service nope: exit 0: %s", out)
	}

	// /metrics, in the Prometheus text format.
	resp, err := p.client.Get(p.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"lameduck_phase", "lameduck_probe_answers_total", "lameduck_requests_in_flight"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// Every call and receive below is bounded, so a process that never
	// ends the stream or never answers fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/lameduck.demo.Demo/Ticks")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := stream.RecvMsg(new(timestamppb.Timestamp)); err != nil {
		t.Fatalf("the stream's first tick: %v", err)
	}
	slow := make(chan error, 1)
	go func() {
		slow <- cc.Invoke(ctx, "/lameduck.demo.Demo/Slow", durationpb.New(5*time.Second), new(emptypb.Empty))
	}()
	// Both calls in flight before the signal.
	awaitInFlight(t, p, 3, "the stream, the slow call, the scrape")

	sigtermThenProbe(t, p, bin, addr, "")
	var streamErr error
	for streamErr == nil {
		streamErr = stream.RecvMsg(new(timestamppb.Timestamp))
	}
	if status.Code(streamErr) != codes.Unavailable {
		t.Errorf("the stream ended with %v, want Unavailable", streamErr)
	}
	select {
	case err := <-slow:
		if err != nil {
			t.Errorf("the slow unary call in flight at SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the slow unary call in flight at SIGTERM got no answer within 1m")
	}
	if code, _ := p.waitExit(30 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// scrapeGauge reads one unlabelled gauge from /metrics.
func scrapeGauge(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	resp, err := p.client.Get(p.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil || fams[name] == nil || len(fams[name].GetMetric()) == 0 {
		t.Fatalf("/metrics: %s: %v", name, err)
	}
	return fams[name].GetMetric()[0].GetGauge().GetValue()
}

// The demo's contrib checks against this machine's servers: /readyz 200 ok
// naming each; a server that is absent skips (fails under CI).
func TestE2EContribChecks(t *testing.T) {
	for _, hp := range []string{"127.0.0.1:5432", "127.0.0.1:3306", "127.0.0.1:6379", "127.0.0.1:4222", "127.0.0.1:5672"} {
		c, err := net.DialTimeout("tcp", hp, 2*time.Second)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is down: %v", hp, err)
			}
			t.Skipf("%s is down: %v", hp, err)
		}
		c.Close()
	}
	p := startChecks(t, nil,
		"--check-postgres", "pg=postgres://postgres@127.0.0.1:5432/test?sslmode=disable,critical",
		"--check-mysql", "my=root@tcp(127.0.0.1:3306)/test,critical",
		"--check-redis", "cache=127.0.0.1:6379",
		"--check-nats", "bus=nats://127.0.0.1:4222",
		"--check-amqp", "broker=amqp://guest:guest@127.0.0.1:5672/")
	r := p.get("/readyz")
	if r.code != http.StatusOK || r.status() != "ok" {
		t.Fatalf("/readyz = %s, want 200 ok", r)
	}
	for _, name := range []string{"pg", "my", "cache", "bus", "broker"} {
		if !strings.Contains(r.raw, `"`+name+`":"ok"`) {
			t.Errorf("/readyz does not say %s is ok: %s", name, r)
		}
	}
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(30 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// go-redis' own lines (its pool failing to dial a Redis that is down) come
// out of the demo as JSON records of the process's handler under
// --log-format json, never as go-redis' plain-text lines on stderr.
func TestE2ERedisLogsThroughSlog(t *testing.T) {
	down := testsupport.HoldPort(t, 0) // bound, never listening: every dial is refused
	p := startChecks(t, nil, "--check-redis", fmt.Sprintf("cache=127.0.0.1:%d", down))
	p.get("/readyz") // a probe runs the check, and go-redis fails to dial
	p.waitLog("go-redis' line through slog", 20*time.Second, func(l logLine) bool {
		return l.rec["client"] == "go-redis" && l.rec["level"] == "WARN"
	})
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(30 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if l, found := p.findLog(func(l logLine) bool { return l.rec == nil }); found {
		t.Errorf("a line that is not JSON: %q", l.raw)
	}
}
