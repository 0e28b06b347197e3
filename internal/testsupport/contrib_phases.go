package testsupport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/lameducktest"
)

// Phases is a Lifecycle for the tests that take a health service (the gRPC
// and Connect integrations') through every phase: starting, serving, a
// critical check failing, draining. It runs on lameducktest's fake clock
// with ShutdownDelay 5s and ShutdownTeardown 5s, so the window lasts until
// the test ends it, and CheckTimeout Timeout (the check answers at once; a
// loaded machine may delay it past 1s). Its logger writes to Logs and to
// t.Output().
type Phases struct {
	LC   *lameduck.Lifecycle
	Clk  *lameducktest.Clock
	Logs *LogBuffer
	// Boot holds startup: the startup task "boot" returns nil once it is
	// closed (or the startup context's error when that ends first).
	Boot chan struct{}
	// Failing makes the critical check "db" fail ("down") while it is true.
	Failing *atomic.Bool
}

// NewPhases returns a Phases whose Lifecycle is made, not run. It fails t
// when the Lifecycle refuses the task or the check.
func NewPhases(t testing.TB) *Phases {
	t.Helper()
	p := &Phases{Logs: &LogBuffer{}, Boot: make(chan struct{}), Failing: &atomic.Bool{}}
	p.LC, p.Clk = NewLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 5 * time.Second,
		CheckTimeout: Timeout, Logger: slog.New(slog.NewTextHandler(io.MultiWriter(p.Logs, t.Output()), nil))})
	if err := p.LC.AddStartupTask("boot", func(ctx context.Context) error {
		select {
		case <-p.Boot:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.LC.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
		if p.Failing.Load() {
			return errors.New("down")
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	return p
}
