package kube_test

import (
	"context"
	"net/http"
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
	e.applyTestdata("connect.yaml", "demo-connect", 3*time.Minute)
	svc := e.serviceAddr("demo-connect")
	pods := e.watchPods("demo")
	g := startGRPCLoad(t, svc, loadRate/4)
	c := startConnectLoad(t, "http://"+svc, loadRate/4)
	time.Sleep(2 * time.Second)
	e.restartRounds("demo-connect", rounds)
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

// startConnectLoad is a callLoad of Connect's Go client calling Slow with a
// 10ms duration over h2c, each of its 8 clients on a transport of its own
// (8 connections, as 8 client processes would hold); finish closes them.
func startConnectLoad(t *testing.T, base string, rate int) *connectLoad {
	t.Helper()
	l := &connectLoad{}
	var callers []caller
	for range 8 {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: p}
		l.trs = append(l.trs, tr)
		c := connect.NewClient[durationpb.Duration, emptypb.Empty](&http.Client{Transport: tr}, base+"/lameduck.demo.Demo/Slow")
		callers = append(callers, func(ctx context.Context) (string, string) {
			if _, err := c.CallUnary(ctx, connect.NewRequest(durationpb.New(10*time.Millisecond))); err != nil {
				return connect.CodeOf(err).String(), err.Error()
			}
			return "", ""
		})
	}
	l.callLoad = startCallLoad(rate, callers)
	return l
}

type connectLoad struct {
	*callLoad
	trs []*http.Transport
}

func (l *connectLoad) finish() loadResult {
	r := l.callLoad.finish()
	for _, tr := range l.trs {
		tr.CloseIdleConnections()
	}
	return r
}
