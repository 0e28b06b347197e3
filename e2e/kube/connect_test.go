package kube_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestConnectRollingRestartsThroughKubeProxy: `lameduck demo --server
// connect` (a Connect RPC service on net/http, h2c), probed by the kubelet's
// own gRPC probes on its one port, through rolling restarts under two
// open-loop loads of unary calls over the Service's ClusterIP: grpc-go
// clients speaking gRPC, and Connect's own Go client speaking the Connect
// protocol over h2c. No call fails.
//
// grpc-go's transparent retries of calls the server refused unprocessed
// are logged, not held at 0 as the grpc-go server's test holds them:
// net/http's HTTP/2 server sends one GOAWAY carrying its last stream id at
// once, where grpc-go's server sends a first GOAWAY and waits for a PING's
// ack, so a call on the wire in that instant is refused before any byte of
// it is read, and the client re-sends it (docs/connect.md, "What lameduck
// cannot do").
func TestConnectRollingRestartsThroughKubeProxy(t *testing.T) {
	e := newEnv(t, "connect")
	body, err := os.ReadFile(filepath.Join("testdata", "connect.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.kubectl(body, "apply", "-f", "-")
	e.waitRolledOut("demo-connect", 3*time.Minute)
	svc := e.serviceAddr("demo-connect")
	pods := e.watchPods("demo")
	g := startGRPCLoad(t, svc, loadRate/4)
	c := startConnectLoad(t, "http://"+svc, loadRate/4)
	time.Sleep(2 * time.Second)
	for i := range rounds {
		start := time.Now()
		e.restart("demo-connect")
		e.waitRolledOut("demo-connect", 4*time.Minute)
		t.Logf("round %d: rolled out, old pods gone, in %.1fs", i+1, time.Since(start).Seconds())
	}
	time.Sleep(2 * time.Second)
	gr, cr := g.finish(), c.finish()
	t.Logf("gRPC (grpc-go): %s", gr)
	t.Logf("Connect (connect-go, h2c): %s", cr)
	if gr.Failed != 0 || cr.Failed != 0 {
		t.Errorf("%d gRPC and %d Connect calls failed across %d rolling restarts, want 0; examples: %q %q",
			gr.Failed, cr.Failed, rounds, gr.Examples, cr.Examples)
	}
	if gr.Total < loadRate/4*10 || cr.Total < loadRate/4*10 {
		t.Errorf("only %d gRPC and %d Connect calls made: the load did not run", gr.Total, cr.Total)
	}
	lives := pods.lives()
	logLives(t, lives)
	checkExits(t, lives, nil, 3*rounds, 0)
}

// connectLoad makes open-loop unary calls (Slow with a 10ms duration) with
// Connect's Go client over h2c, rate a second, spread over 8 clients of
// their own transport (8 connections, as 8 client processes would hold).
type connectLoad struct {
	stop     context.CancelFunc
	wg       sync.WaitGroup
	trs      []*http.Transport
	total    atomic.Int64
	mu       sync.Mutex
	failed   int
	kinds    map[string]int
	examples []string
}

func startConnectLoad(t *testing.T, base string, rate int) *connectLoad {
	t.Helper()
	l := &connectLoad{kinds: map[string]int{}}
	var clients []*connect.Client[durationpb.Duration, emptypb.Empty]
	for range 8 {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: p}
		l.trs = append(l.trs, tr)
		clients = append(clients, connect.NewClient[durationpb.Duration, emptypb.Empty](&http.Client{Transport: tr}, base+"/lameduck.demo.Demo/Slow"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	l.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			c := clients[i%len(clients)]
			l.wg.Go(func() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := c.CallUnary(cctx, connect.NewRequest(durationpb.New(10*time.Millisecond)))
				l.total.Add(1)
				if err != nil {
					l.mu.Lock()
					l.failed++
					code := connect.CodeOf(err).String()
					l.kinds[code]++
					if len(l.examples) < 5 {
						l.examples = append(l.examples, time.Now().Format("15:04:05.000")+" "+err.Error())
					}
					l.mu.Unlock()
				}
			})
		}
	})
	return l
}

func (l *connectLoad) finish() loadResult {
	l.stop()
	l.wg.Wait()
	for _, tr := range l.trs {
		tr.CloseIdleConnections()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadResult{Total: int(l.total.Load()), Failed: l.failed, Kinds: l.kinds, Examples: slices.Clone(l.examples)}
}
