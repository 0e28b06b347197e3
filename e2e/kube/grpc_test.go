package kube_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestGRPCRollingRestartsThroughKubeProxy: the demo's gRPC service, probed
// by the kubelet's own gRPC probes, through rolling restarts under
// open-loop unary calls over the Service's ClusterIP: no call fails and
// the server refuses none it received (see retryCounter).
func TestGRPCRollingRestartsThroughKubeProxy(t *testing.T) {
	e := newEnv(t, "grpc")
	e.applyTestdata("grpc.yaml", "demo-grpc", 3*time.Minute)
	svc := e.serviceAddr("demo-grpc")
	pods := e.watchPods("demo")
	l := startGRPCLoad(t, svc, loadRate/2)
	time.Sleep(2 * time.Second)
	e.restartRounds("demo-grpc", rounds)
	time.Sleep(2 * time.Second)
	r := l.finish()
	t.Logf("gRPC: %s", r)
	if r.Failed != 0 || r.Resent != 0 {
		t.Errorf("%d calls failed and %d were refused by a server after they were sent across %d rolling restarts, want 0 and 0; examples: %q",
			r.Failed, r.Resent, rounds, r.Examples)
	}
	if r.Total < loadRate/2*10 {
		t.Errorf("only %d calls made: the load did not run", r.Total)
	}
	lives := pods.lives()
	logLives(t, lives)
	checkExits(t, lives, nil, 3*rounds, 0)
}

// serviceAddr is <ClusterIP>:<port> of a Service, once a gRPC health
// check through it answers.
func (e *env) serviceAddr(name string) string {
	e.t.Helper()
	svc, err := e.cs.CoreV1().Services(e.ns).Get(e.t.Context(), name, metav1GetOptions)
	if err != nil {
		e.t.Fatal(err)
	}
	addr := fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	waitUntil(e.t, time.Minute, "kube-proxy routing "+addr, func() error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(e.t.Context(), 2*time.Second)
		defer cancel()
		return conn.Invoke(ctx, "/lameduck.demo.Demo/Slow", durationpb.New(0), new(emptypb.Empty))
	})
	return addr
}

// callLoad makes open-loop unary calls, rate a second, each through the
// next of its callers in turn (one per client connection, as that many
// client processes would hold them: kube-proxy pins each connection to one
// pod), each within 10s, and counts the calls and the failures by code.
type callLoad struct {
	stop     context.CancelFunc
	wg       sync.WaitGroup
	total    atomic.Int64
	mu       sync.Mutex
	failed   int
	kinds    map[string]int
	examples []string
}

// caller makes one call within ctx and returns "" when it succeeded, else
// the failure's code and how it read.
type caller func(ctx context.Context) (code, desc string)

func startCallLoad(rate int, callers []caller) *callLoad {
	l := &callLoad{kinds: map[string]int{}}
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
			call := callers[i%len(callers)]
			l.wg.Go(func() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				code, desc := call(cctx)
				l.total.Add(1)
				if code == "" {
					return
				}
				l.mu.Lock()
				defer l.mu.Unlock()
				l.failed++
				l.kinds[code]++
				if len(l.examples) < 5 {
					l.examples = append(l.examples, time.Now().Format("15:04:05.000")+" "+desc)
				}
			})
		}
	})
	return l
}

// finish stops the load, waits for the calls in flight and counts them all.
func (l *callLoad) finish() loadResult {
	l.stop()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadResult{Total: int(l.total.Load()), Failed: l.failed, Kinds: l.kinds, Examples: slices.Clone(l.examples)}
}

// grpcLoad is a callLoad of grpc-go clients calling Slow with a 10ms
// duration over 8 connections, with the transparent retries counted (see
// retryCounter): a draining pod's GOAWAY sends its connection elsewhere.
type grpcLoad struct {
	*callLoad
	conns    []*grpc.ClientConn
	refused  atomic.Int64 // transparent retries of calls the server refused
	repicked atomic.Int64 // transparent retries of calls that never left the client
}

// retryCounter sorts the attempts grpc-go makes on its own (transparent
// retries: it re-sends only a call it knows the server never processed) by
// whether an earlier attempt of the call had already put its headers on a
// connection:
//   - refused: it had, and the server then refused the stream (HTTP/2
//     REFUSED_STREAM, or a GOAWAY whose last stream id is below it). A
//     server that drains right never does this: grpc-go's GracefulStop
//     sends a first GOAWAY and a PING, and only after the client's PING ack
//     the final GOAWAY, so every stream the client opened before it saw the
//     first GOAWAY is served. This is the count the test holds at 0.
//   - re-picked: it had not. The client's picker handed the call a
//     connection that, in the same instant, had read the server's first
//     GOAWAY (grpc-go's transport refuses new streams once draining), so the
//     call moved to another connection before any byte of it left the
//     client: nothing was sent twice. How often the two race is the
//     client's scheduling luck, so the test logs it and never asserts it.
type retryCounter struct{ refused, repicked *atomic.Int64 }

// callKey marks a call's context with the state its attempts share.
type callKey struct{}

// callState is one unary call across its attempts.
type callState struct{ sent atomic.Bool }

func (retryCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (r retryCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(callKey{}).(*callState)
	if c == nil {
		return
	}
	switch s := s.(type) {
	case *stats.OutHeader:
		c.sent.Store(true)
	case *stats.Begin:
		if !s.IsTransparentRetryAttempt {
			return
		}
		if c.sent.Load() {
			r.refused.Add(1)
		} else {
			r.repicked.Add(1)
		}
	}
}
func (retryCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (retryCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func startGRPCLoad(t *testing.T, addr string, rate int) *grpcLoad {
	t.Helper()
	l := &grpcLoad{}
	var callers []caller
	for range 8 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(retryCounter{&l.refused, &l.repicked}))
		if err != nil {
			t.Fatal(err)
		}
		l.conns = append(l.conns, conn)
		callers = append(callers, func(ctx context.Context) (string, string) {
			err := conn.Invoke(context.WithValue(ctx, callKey{}, new(callState)), "/lameduck.demo.Demo/Slow", durationpb.New(10*time.Millisecond), new(emptypb.Empty))
			if err == nil {
				return "", ""
			}
			st := status.Convert(err)
			return st.Code().String(), st.Code().String() + ": " + st.Message()
		})
	}
	l.callLoad = startCallLoad(rate, callers)
	return l
}

func (l *grpcLoad) finish() loadResult {
	r := l.callLoad.finish()
	for _, c := range l.conns {
		c.Close()
	}
	r.Resent, r.Repicked = int(l.refused.Load()), int(l.repicked.Load())
	return r
}
