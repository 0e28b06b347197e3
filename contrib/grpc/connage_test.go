package ldgrpc_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lameduck/lameduck"
	ldgrpc "github.com/lameduck/lameduck/contrib/grpc"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// With Config.MaxConnectionAge, ServerOptions sets grpc-go's
// MaxConnectionAge: the server sends GOAWAY to an old connection and the
// client reconnects. The test counts the connections the server accepted
// while one client keeps calling: a GOAWAY each beyond the first. gRPC's
// timers are real, so it waits for the count (up to 20s), asserting no
// speed; without the setting one connection serves every call.
func TestMaxConnectionAgeSendsGOAWAY(t *testing.T) {
	for _, age := range []time.Duration{0, 200 * time.Millisecond} {
		var logs bytes.Buffer
		lc, err := lameduck.New(lameduck.Config{ShutdownDelay: 0, ShutdownTeardown: 5 * time.Second, IgnoreSignals: true,
			MaxConnectionAge: age, LookupEnv: func(string) (string, bool) { return "", false }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		srv := ldgrpc.New(lc)
		gs := grpc.NewServer(srv.ServerOptions()...)
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := &countingListener{Listener: inner}
		if err := srv.AddServer(gs, "", ln); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- lc.Run(context.Background()) }()
		<-lc.Events().StartupDone.Done()
		cc, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		hc := healthpb.NewHealthClient(cc)
		calls := 0
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("age %s: Check: %v", age, err)
			}
			calls++
			if age == 0 && calls == 50 || age > 0 && ln.n.Load() >= 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		n := ln.n.Load()
		t.Logf("MaxConnectionAge %s: %d calls over %d connection(s), %d GOAWAY(s)", age, calls, n, n-1)
		if age == 0 && n != 1 || age > 0 && n < 3 {
			t.Errorf("MaxConnectionAge %s: %d connection(s) for %d calls; want 1 without an age, 3 or more with one", age, n, calls)
		}
		cc.Close()
		lc.BeginShutdown("test")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
