package rpcserve_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/rpcserve"
	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run makes a Lifecycle from cfg with one in-memory server, so it needs no
// socket inside a bubble, starts Run and returns once the boot is done.
// The returned function begins the shutdown and waits for Run.
func run(t *testing.T, cfg lameduck.Config) (*lameduck.Lifecycle, func()) {
	t.Helper()
	cfg.IgnoreSignals = true
	cfg.LookupEnv = func(string) (string, bool) { return "", false }
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.AddServerFuncs(testsupport.SlowServer(0), testsupport.NewChanListener()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- lc.Run(context.Background()) }()
	<-lc.Events().StartupDone.Done()
	return lc, func() {
		t.Helper()
		lc.BeginShutdown("test")
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

// ProbeOK asks the paths the Lifecycle was configured with: a moved
// liveness path answers, and readiness follows the phase.
func TestProbeOKAsksTheConfiguredPaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc, stop := run(t, lameduck.Config{ShutdownDelay: time.Second, LivenessPaths: []string{"/live"}, ReadinessPath: "/ready"})
		ctx := context.Background()
		if !rpcserve.ProbeOK(ctx, lc, true) {
			t.Error("ProbeOK(liveness) = false while serving; want /live's 200")
		}
		if !rpcserve.ProbeOK(ctx, lc, false) {
			t.Error("ProbeOK(readiness) = false while serving; want /ready's 200")
		}
		lc.BeginShutdown("test")
		if rpcserve.ProbeOK(ctx, lc, false) {
			t.Error("ProbeOK(readiness) = true after the signal; want /ready's 503")
		}
		if !rpcserve.ProbeOK(ctx, lc, true) {
			t.Error("ProbeOK(liveness) = false in the window; want /live's 200")
		}
		stop()
	})
}

// A stream's context ends at the window's end, its cause saying so, and
// the caller's error replaces the stream's; a stream that returns before
// keeps its own error.
func TestUntilWindowEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc, stop := run(t, lameduck.Config{ShutdownDelay: time.Second})
		ctx := context.Background()
		own, ended := errors.New("own"), errors.New("ended")
		endedErr := func() error { return ended }
		if err := rpcserve.UntilWindowEnd(ctx, lc, func(context.Context) error { return own }, endedErr); err != own {
			t.Errorf("a stream that returns while serving: UntilWindowEnd = %v; want its own error", err)
		}
		lc.BeginShutdown("test")
		began := time.Now()
		var cause error
		err := rpcserve.UntilWindowEnd(ctx, lc, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return own
		}, endedErr)
		if err != ended {
			t.Errorf("a stream the window's end cut: UntilWindowEnd = %v; want ended's error", err)
		}
		if d := time.Since(began); d != time.Second {
			t.Errorf("the stream's context ended %s after the signal; want the window, 1s", d)
		}
		if cause == nil || cause.Error() != "lameduck: the lame-duck window ended" {
			t.Errorf("context.Cause = %v; want the window's end", cause)
		}
		stop()
	})
}

// Marks knows a service once Set names it, reports its mark, and closes
// the channel Lookup returned before each Set.
func TestMarks(t *testing.T) {
	m := rpcserve.NewMarks()
	known, down, changed := m.Lookup("a")
	if known || down {
		t.Errorf("Lookup(a) before Set = %v, %v; want unknown", known, down)
	}
	m.Set("a", false)
	select {
	case <-changed:
	default:
		t.Error("Set did not close the channel Lookup returned before it")
	}
	if known, down, _ := m.Lookup("a"); !known || !down {
		t.Errorf("Lookup(a) after Set(a, false) = %v, %v; want known, down", known, down)
	}
	m.Set("b", true)
	if known, down, _ := m.Lookup("b"); !known || down {
		t.Errorf("Lookup(b) after Set(b, true) = %v, %v; want known, serving", known, down)
	}
	if names := m.Names(); len(names) != 2 {
		t.Errorf("Names = %q; want a and b", names)
	}
}

// A Watch stream is woken at the boot's end, at the signal, on Set and
// every period, each event once; Next returns false once done is closed.
func TestWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := rpcserve.NewMarks()
		lc, stop := run(t, lameduck.Config{ShutdownDelay: time.Second})
		w := m.Wakes(lc, "a", time.Minute)
		defer w.Stop()
		// wait calls Next, does event once Next is blocked, and returns
		// how long Next took.
		wait := func(what string, event func()) time.Duration {
			t.Helper()
			began := time.Now()
			woke := make(chan bool)
			go func() { woke <- w.Next(nil) }()
			synctest.Wait()
			event()
			if !<-woke {
				t.Errorf("%s: Next = false; want true", what)
			}
			return time.Since(began)
		}
		if d := wait("the boot's end", func() {}); d != 0 {
			t.Errorf("the first Next waited %s; want at once, the boot being done", d)
		}
		if d := wait("Set", func() { m.Set("a", false) }); d != 0 {
			t.Errorf("Next waited %s for Set; want at once", d)
		}
		if d := wait("the signal", func() { lc.BeginShutdown("test") }); d != 0 {
			t.Errorf("Next waited %s for the signal; want at once", d)
		}
		if d := wait("no event", func() {}); d != time.Minute {
			t.Errorf("Next with no event waited %s; want the period, 1m", d)
		}
		done := make(chan struct{})
		close(done)
		if w.Next(done) {
			t.Error("Next(done) = true with done closed; want false")
		}
		stop()
	})
}
