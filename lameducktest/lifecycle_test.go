package lameducktest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
)

// A user's own drain test: a write started while draining is joined before
// Run returns, on a fake clock, in microseconds.
func TestUsersOwnDrain(t *testing.T) {
	cfg := lameduck.Config{ShutdownDelay: 5 * time.Second}
	clk := lameducktest.Configure(t, &cfg)
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	wantWindow(t, lc, 5*time.Second)
}

func TestEndWindowBeforeReady(t *testing.T) {
	lc, clk := newLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	release := make(chan struct{})
	lc.AddStartupTask("slow boot", func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	defer close(release)
	wait := startNoWait(t, lc)
	lameducktest.EndWindow(t, lc, clk) // never ready: no window to wait
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// newLifecycle returns a Lifecycle made by lameduck.New from cfg as
// Configure sets it up, and its clock; it fails t when New refuses cfg.
func newLifecycle(t *testing.T, cfg lameduck.Config) (*lameduck.Lifecycle, *lameducktest.Clock) {
	t.Helper()
	clk := lameducktest.Configure(t, &cfg)
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lc, clk
}

// Configure puts the Config on a fresh fake clock with no signals and no
// environment, and keeps the LookupEnv and Logger a test set: a host's
// LAMEDUCK_SHUTDOWN_DELAY does not reach the Lifecycle.
func TestConfigure(t *testing.T) {
	t.Setenv("LAMEDUCK_SHUTDOWN_DELAY", "9s")
	var cfg lameduck.Config
	clk := lameducktest.Configure(t, &cfg)
	if cfg.Clock != clk || !cfg.IgnoreSignals || cfg.Logger == nil {
		t.Fatalf("Configure set Clock %v (want %v), IgnoreSignals %v, Logger %v", cfg.Clock, clk, cfg.IgnoreSignals, cfg.Logger)
	}
	if want := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); !clk.Now().Equal(want) {
		t.Errorf("the clock reads %s, want %s", clk.Now(), want)
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := lc.Config().ShutdownDelay; d == 9*time.Second {
		t.Errorf("ShutdownDelay %s: the host's environment reached the Lifecycle", d)
	}

	lookup := func(k string) (string, bool) { return "2s", k == "LAMEDUCK_SHUTDOWN_DELAY" }
	logger := slog.New(slog.DiscardHandler)
	cfg = lameduck.Config{LookupEnv: lookup, Logger: logger}
	lameducktest.Configure(t, &cfg)
	if cfg.Logger != logger {
		t.Error("Configure replaced the test's Logger")
	}
	if lc, err = lameduck.New(cfg); err != nil {
		t.Fatal(err)
	}
	if d := lc.Config().ShutdownDelay; d != 2*time.Second {
		t.Errorf("ShutdownDelay %s, want the test's LookupEnv's 2s", d)
	}
}

// startNoWait starts Run without waiting for the boot (Start would wait
// for a boot that never ends); the func it returns waits for Run's result,
// failing the test after 10s of real time (a hang guard, not a
// synchronisation).
func startNoWait(t *testing.T, lc *lameduck.Lifecycle) func() error {
	done := make(chan error, 1)
	go func() { done <- lc.Run(context.Background()) }()
	return func() error {
		t.Helper()
		return testsupport.Recv(t, done, "Run to return")
	}
}

// The test began the sequence itself, while serving: EndWindow takes it
// through the rest of the window, measured from that start.
func TestEndWindowAfterBeginShutdown(t *testing.T) {
	lc, clk := newLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	wait := lameducktest.Start(t, lc)
	lc.BeginShutdown("rolling update")
	lameducktest.EndWindow(t, lc, clk)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	wantWindow(t, lc, 5*time.Second)
}

// BeginShutdown before Run: the pod never became ready, so there is no
// window, and EndWindow returns without advancing the clock.
func TestEndWindowAfterBeginShutdownBeforeRun(t *testing.T) {
	lc, clk := newLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second})
	lc.BeginShutdown("test")
	wait := lameducktest.Start(t, lc)
	before := clk.Now()
	lameducktest.EndWindow(t, lc, clk)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if !clk.Now().Equal(before) {
		t.Fatalf("the clock moved %s though the window was skipped", clk.Now().Sub(before))
	}
	lameducktest.EndWindow(t, lc, clk) // the window is over: nothing to do
}

// fatalRecorder records what a helper reports through Fatal and ends the
// goroutine, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// In idle mode there is no fixed window to advance through: EndWindow says
// so at once instead of hanging.
func TestEndWindowFailsAtOnceInIdleMode(t *testing.T) {
	lc, clk := newLifecycle(t, lameduck.Config{ShutdownDelay: time.Second, DrainMode: lameduck.DrainIdle})
	wait := lameducktest.Start(t, lc)
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		lameducktest.EndWindow(rec, lc, clk)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("EndWindow hung in idle mode")
	}
	if !strings.Contains(rec.msg, `drain mode "idle"`) || !strings.Contains(rec.msg, "advance clk yourself") {
		t.Fatalf("EndWindow said %q", rec.msg)
	}
	lc.BeginShutdown("test")
	// The idle window's first timer (its 1s minimum) is armed before the
	// clock moves: advancing while the window reads the clock and before it
	// arms that timer would leave it due after the advance, and Run waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the idle window never armed its timer: %v", err)
	}
	clk.Advance(30 * time.Second) // the idle drain ends at once: no traffic, past the delay
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// wantWindow fails t unless lc's window, from ShutdownInitiated to
// WindowEnded on the fake clock, lasted want.
func wantWindow(t *testing.T, lc *lameduck.Lifecycle, want time.Duration) {
	t.Helper()
	s, _ := lc.Events().ShutdownInitiated.At()
	e, _ := lc.Events().WindowEnded.At()
	if e.Sub(s) != want {
		t.Fatalf("window %s on the fake clock, want %s", e.Sub(s), want)
	}
}
