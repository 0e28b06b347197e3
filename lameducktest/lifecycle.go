package lameducktest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

// New returns a Lifecycle for a test, and the fake clock it runs on: cfg
// with Clock set to a new [Clock], IgnoreSignals set (the test process's
// own signals are left alone), an empty environment (LookupEnv reads
// nothing, so the host's LAMEDUCK_* variables cannot change the test), and
// Logger writing to t's output (until the test is over; later lines are
// dropped) unless cfg sets one. It fails t when New
// refuses cfg.
func New(t testing.TB, cfg lameduck.Config) (*lameduck.Lifecycle, *Clock) {
	t.Helper()
	clk := NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	cfg.IgnoreSignals = true
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter(t), nil))
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatalf("lameducktest.New: %v", err)
	}
	return lc, clk
}

// Start runs lc.Run in a goroutine and returns a function that waits for
// its result. The wait fails t if Run has not returned within 10 seconds of
// real time, a guard against a hang rather than a synchronisation. Start
// returns once the boot has finished (StartupDone) or the sequence has
// begun, so the servers are bound and the probes answer.
func Start(t testing.TB, lc *lameduck.Lifecycle) (wait func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- lc.Run(context.Background()) }()
	select {
	case <-lc.Events().StartupDone.Done():
	case <-lc.Events().ShutdownInitiated.Done():
	case err := <-done:
		done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("lameducktest.Start: Run neither finished its boot nor began its shutdown within 10s")
	}
	return func() error {
		t.Helper()
		select {
		case err := <-done:
			done <- err // a second wait sees the same result
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("lameducktest: Run did not return within 10s")
			return nil
		}
	}
}

// EndWindow starts the shutdown sequence, as SIGTERM would, and advances
// clk through the fixed lame-duck window (Config.ShutdownDelay); it returns
// when teardown has begun. Call it while nothing else is creating timers on
// clk (the window's timer is told apart by count). In DrainIdle mode,
// advance the clock yourself. It fails t when the window does not end.
func EndWindow(t testing.TB, lc *lameduck.Lifecycle, clk *Clock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waits := lc.Phase() == lameduck.PhaseServing && lc.Config().ShutdownDelay > 0
	before := clk.Pending()
	lc.BeginShutdown("test")
	if waits {
		if err := clk.WaitForTimers(ctx, before+1); err != nil {
			t.Fatalf("lameducktest.EndWindow: the window never started waiting: %v", err)
		}
		clk.Advance(lc.Config().ShutdownDelay)
	}
	select {
	case <-lc.Events().WindowEnded.Done():
	case <-ctx.Done():
		t.Fatal("lameducktest.EndWindow: the window did not end")
	}
}

// testWriter writes to t's output until t's cleanup runs, and drops what is
// written after: a goroutine that logs once the test is over (a readiness
// ping that returns late, say) must not make testing panic.
func testWriter(t testing.TB) io.Writer {
	w := &lateWriter{out: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

type lateWriter struct {
	mu   sync.Mutex
	out  io.Writer // guarded by mu
	done bool      // guarded by mu: the test is over
}

func (w *lateWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.out.Write(p)
}
