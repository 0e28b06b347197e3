package lameducktest_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// A user's own drain test: a write started while draining is joined before
// Run returns, on a fake clock, in microseconds.
func TestUsersOwnDrain(t *testing.T) {
	lc, clk := lameducktest.New(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, ln)
	wait := lameducktest.Start(t, lc)
	if lc.Phase() != lameduck.PhaseServing {
		t.Fatalf("phase %s after Start", lc.Phase())
	}
	release, wrote := make(chan struct{}), make(chan struct{})
	if err := lc.GoWrite("audit-row", 0, func(context.Context) error {
		<-release
		close(wrote)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	lameducktest.EndWindow(t, lc, clk)
	close(release) // the join is waiting for it
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wrote:
	default:
		t.Fatal("Run returned before the write finished")
	}
	s, _ := lc.Events().ShutdownInitiated.At()
	e, _ := lc.Events().WindowEnded.At()
	if e.Sub(s) != 5*time.Second {
		t.Fatalf("window %s on the fake clock, want 5s", e.Sub(s))
	}
}

func TestEndWindowBeforeReady(t *testing.T) {
	lc, clk := lameducktest.New(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	release := make(chan struct{})
	lc.AddStartupTask("slow boot", func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	defer close(release)
	wait := startNoWait(lc)
	lameducktest.EndWindow(t, lc, clk) // never ready: no window to wait
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func startNoWait(lc *lameduck.Lifecycle) func() error {
	done := make(chan error, 1)
	go func() { done <- lc.Run(context.Background()) }()
	return func() error { return <-done }
}
