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

// Configure sets up cfg for a test and returns the fake clock it now runs
// on; build the Lifecycle from it with lameduck.New (or worker.New, with
// the runner's Config.Lifecycle), as the code under test does:
//
//	cfg := lameduck.Config{ShutdownDelay: 5 * time.Second}
//	clk := lameducktest.Configure(t, &cfg)
//	lc, err := lameduck.New(cfg)
//
// It sets Clock to a new [Clock] reading 2026-01-01 00:00 UTC (replacing
// any clock cfg had), IgnoreSignals (the test process's own signals are
// left alone), an empty environment unless cfg sets LookupEnv (LookupEnv
// reads nothing, so the host's LAMEDUCK_* variables cannot change the
// test), and Logger writing to t's output unless cfg sets one (until the
// test is over; later lines are dropped). It leaves every other field as
// it is. The clock belongs to one Lifecycle: call Configure again for
// another.
func Configure(t testing.TB, cfg *lameduck.Config) *Clock {
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
	return clk
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

// EndWindow takes lc through its fixed lame-duck window
// (Config.ShutdownDelay) and returns when teardown has begun
// (Events().WindowEnded has fired). It starts the sequence, as SIGTERM
// would, unless something already did — BeginShutdown, GET /prestop, the
// cancellation of Run's context, a failed startup task — and advances clk
// to the window's end, measured from when the sequence started; a window
// that is already over, or that the sequence skipped (the pod never became
// ready), needs no advance. Run must be running (see [Start]).
//
// It fails t at once, saying why, when no fixed window can be advanced
// through: in DrainIdle mode and for a runner (the window ends when traffic
// or the jobs in flight do: advance clk yourself and wait on
// Events().WindowEnded), or when Run stopped before a window. It fails t
// after 10s of real time when the window never starts or never ends.
func EndWindow(t testing.TB, lc *lameduck.Lifecycle, clk *Clock) {
	t.Helper()
	ev, cfg := lc.Events(), lc.Config()
	if ev.WindowEnded.Fired() {
		return
	}
	if ev.Stopped.Fired() {
		t.Fatal("lameducktest.EndWindow: Run has stopped without a lame-duck window (a listener failed to bind?)")
		return
	}
	if cfg.DrainMode != lameduck.DrainDelay {
		ends := "traffic is idle (or at DrainTimeout)"
		if cfg.DrainMode != lameduck.DrainIdle { // a runner's mode (package worker)
			ends = "the jobs in flight do (or at DrainTimeout)"
		}
		t.Fatalf("lameducktest.EndWindow: in drain mode %q the window has no fixed end: it ends when %s; "+
			"advance clk yourself and wait on lc.Events().WindowEnded", cfg.DrainMode, ends)
		return
	}
	lc.BeginShutdown("test") // nothing, if the sequence has already started
	start, _ := ev.ShutdownInitiated.At()
	end := start.Add(max(cfg.ShutdownDelay, 0))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Wake the wait below when the window ends without a timer (skipped,
	// or already past on clk) or when time is up.
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ev.WindowEnded.Done():
		case <-ctx.Done():
		}
		clk.mu.Lock()
		defer clk.mu.Unlock()
		clk.changed.Broadcast()
	})
	defer func() { cancel(); wg.Wait() }()
	// The window's timer is the one due at its end.
	clk.mu.Lock()
	for !ev.WindowEnded.Fired() && !clk.dueLocked(end) && ctx.Err() == nil {
		clk.changed.Wait()
	}
	now := clk.now
	clk.mu.Unlock()
	if !ev.WindowEnded.Fired() {
		if ctx.Err() != nil {
			t.Fatal("lameducktest.EndWindow: the window never started waiting on clk; is Run running (lameducktest.Start)?")
			return
		}
		if end.After(now) {
			clk.Advance(end.Sub(now))
		}
	}
	select {
	case <-ev.WindowEnded.Done():
	case <-time.After(10 * time.Second):
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
