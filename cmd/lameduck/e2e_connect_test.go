package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	connectrpc "connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestE2EConnect runs end-to-end cases of the net/http demo, unchanged,
// against `lameduck demo --server connect`, whose routes share the server
// with the Connect service: the drain of HTTP requests, the keep-alive and
// h2c hand-offs (GOAWAY seen frame by frame), the budget's cut, and the rollout simulator's rolling
// restarts under load, 0 failed.
func TestE2EConnect(t *testing.T) {
	rerun(t,
		TestE2ESIGTERMDrainsInFlightRequest,
		TestE2ENewConnectionsServedThroughWindow,
		TestE2EKeepAliveClientHandedOver,
		TestE2EH2CHandOver,
		TestE2ETeardownBudgetCutsLongRequest,
		TestRolloutDemoDropsNothing,
	)
}

// `lameduck demo --server connect` with a real SIGTERM: grpc-health-probe
// (a grpc-go client, as the kubelet's gRPC probe is) reads SERVING, then
// NOT_SERVING for readiness at the signal while liveness stays SERVING;
// Connect's own Go client makes slow unary calls over the Connect, gRPC
// and gRPC-Web protocols, on HTTP/1.1 and h2c, that are in flight at the
// signal and outlive the window: every one is answered; calls made in the
// window are answered; a server stream ends with Unavailable at the
// window's end; the process exits 0 after a clean drain.
func TestE2EConnectDrain(t *testing.T) {
	bin := healthProbeBin(t)
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "2s"), "--server", "connect")
	addr := strings.TrimPrefix(p.base, "http://")
	for _, svc := range []string{"", "liveness", "readiness"} {
		if code, out := healthProbe(t, bin, addr, svc); code != 0 {
			t.Fatalf("grpc-health-probe -service %q while serving: exit %d: %s", svc, code, out)
		}
	}
	type client struct {
		name string
		http *http.Client
		opts []connectrpc.ClientOption
	}
	var clients []client
	for _, proto := range []string{"connect", "grpc", "grpcweb"} {
		for _, h2 := range []bool{false, true} {
			if proto == "grpc" && !h2 {
				continue // gRPC needs HTTP/2
			}
			pr := new(http.Protocols)
			name := proto + "/http1.1"
			if h2 {
				pr.SetUnencryptedHTTP2(true)
				name = proto + "/h2c"
			} else {
				pr.SetHTTP1(true)
			}
			tr := &http.Transport{Protocols: pr}
			t.Cleanup(tr.CloseIdleConnections)
			c := client{name: name, http: &http.Client{Transport: tr}}
			switch proto {
			case "grpc":
				c.opts = []connectrpc.ClientOption{connectrpc.WithGRPC()}
			case "grpcweb":
				c.opts = []connectrpc.ClientOption{connectrpc.WithGRPCWeb()}
			}
			clients = append(clients, c)
		}
	}
	// Every call below is bounded, so a process that never answers fails
	// the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slow := func(c client, d time.Duration) error {
		_, err := connectrpc.NewClient[durationpb.Duration, emptypb.Empty](c.http, p.base+"/lameduck.demo.Demo/Slow", c.opts...).
			CallUnary(ctx, connectrpc.NewRequest(durationpb.New(d)))
		return err
	}
	ticks, err := connectrpc.NewClient[emptypb.Empty, timestamppb.Timestamp](clients[1].http, p.base+"/lameduck.demo.Demo/Ticks", clients[1].opts...).
		CallServerStream(ctx, connectrpc.NewRequest(&emptypb.Empty{}))
	if err != nil || !ticks.Receive() {
		t.Fatalf("the stream's first tick: %v %v", err, ticks.Err())
	}
	defer ticks.Close()
	var mu sync.Mutex
	failed := map[string]error{}
	var wg sync.WaitGroup
	const perClient = 4
	for _, c := range clients {
		for range perClient {
			wg.Go(func() {
				if err := slow(c, 4*time.Second); err != nil {
					mu.Lock()
					failed[c.name+" in flight at SIGTERM"] = err
					mu.Unlock()
				}
			})
		}
	}
	inFlight := perClient*len(clients) + 1 // the calls and the stream
	awaitInFlight(t, p, inFlight+1, "the calls, the stream and the scrape")
	sigtermThenProbe(t, p, bin, addr, "readiness")
	for _, c := range clients { // in the window: still answered
		if err := slow(c, 0); err != nil {
			mu.Lock()
			failed[c.name+" in the window"] = err
			mu.Unlock()
		}
	}
	for ticks.Receive() {
	}
	if code := connectrpc.CodeOf(ticks.Err()); code != connectrpc.CodeUnavailable {
		t.Errorf("the stream ended with %v, want Unavailable", ticks.Err())
	}
	wg.Wait()
	t.Logf("%d calls in flight at SIGTERM over %d protocol/transport pairs, %d calls in the window: %d failed", perClient*len(clients), len(clients), len(clients), len(failed))
	for what, err := range failed {
		t.Errorf("%s: %v", what, err)
	}
	if code, _ := p.waitExit(30 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if _, ok := p.findLog(msgContains("every in-flight request finished")); !ok {
		t.Errorf("the drain was not clean:\n%s", p.output())
	}
}
