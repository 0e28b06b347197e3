package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	body, err := os.ReadFile(filepath.Join("testdata", "grpc.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.kubectl(body, "apply", "-f", "-")
	e.waitRolledOut("demo-grpc", 3*time.Minute)
	svc := e.serviceAddr("demo-grpc")
	pods := e.watchPods("demo")
	l := startGRPCLoad(t, svc, loadRate/2)
	time.Sleep(2 * time.Second)
	for i := range rounds {
		start := time.Now()
		e.restart("demo-grpc")
		e.waitRolledOut("demo-grpc", 4*time.Minute)
		t.Logf("round %d: rolled out, old pods gone, in %.1fs", i+1, time.Since(start).Seconds())
	}
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

// grpcLoad makes open-loop unary calls (Slow with a 10ms duration), rate a
// second, spread over 8 client connections as 8 client processes would
// hold them: kube-proxy pins each connection to one pod, and a draining
// pod's GOAWAY sends its connection elsewhere.
type grpcLoad struct {
	stop     context.CancelFunc
	wg       sync.WaitGroup
	conns    []*grpc.ClientConn
	total    atomic.Int64
	refused  atomic.Int64 // transparent retries of calls the server refused
	repicked atomic.Int64 // transparent retries of calls that never left the client
	mu       sync.Mutex
	failed   int
	kinds    map[string]int
	examples []string
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
	l := &grpcLoad{kinds: map[string]int{}}
	for range 8 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(retryCounter{&l.refused, &l.repicked}))
		if err != nil {
			t.Fatal(err)
		}
		l.conns = append(l.conns, conn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			conn := l.conns[i%len(l.conns)]
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				cctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callKey{}, new(callState)), 10*time.Second)
				defer cancel()
				err := conn.Invoke(cctx, "/lameduck.demo.Demo/Slow", durationpb.New(10*time.Millisecond), new(emptypb.Empty))
				l.total.Add(1)
				if err != nil {
					l.mu.Lock()
					l.failed++
					st := status.Convert(err)
					l.kinds[st.Code().String()]++
					if len(l.examples) < 5 {
						l.examples = append(l.examples, time.Now().Format("15:04:05.000")+" "+st.Code().String()+": "+st.Message())
					}
					l.mu.Unlock()
				}
			}()
		}
	}()
	return l
}

func (l *grpcLoad) finish() loadResult {
	l.stop()
	l.wg.Wait()
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadResult{Total: int(l.total.Load()), Failed: l.failed, Resent: int(l.refused.Load()), Repicked: int(l.repicked.Load()), Kinds: l.kinds,
		Examples: slices.Clone(l.examples)}
}
