package lameduck_test

// Signals: what a second signal does, and what counts as one.

import (
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

// "Only a signal after an earlier signal is a second signal. After GET
// /prestop, BeginShutdown, a cancelled context or a fatal error, the first
// signal is logged and ignored even with the setting on."
func TestSignalAfterANonSignalStartIsNoSecondSignal(t *testing.T) {
	for _, start := range []string{"BeginShutdown", "cancelled context", "fatal error"} {
		t.Run(start, func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: 4 * time.Second, ExitOnSecondSignal: true})
			lameduck.SetExit(h.lc, func(code int) { t.Errorf("exit(%d): the first signal after %s is no second signal", code, start) })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var fl failingListener
			if start == "fatal error" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				fl = failingListener{ln, make(chan struct{})}
				if err := h.lc.AddServer(&http.Server{Handler: okHandler}, fl); err != nil {
					t.Fatal(err)
				}
			} else {
				h.serve(okHandler)
			}
			h.done = make(chan error, 1)
			go func() { h.done <- h.lc.Run(ctx) }()
			await(t, h.lc.Events().StartupDone)
			switch start {
			case "BeginShutdown":
				h.lc.BeginShutdown("test")
			case "cancelled context":
				cancel()
			case "fatal error":
				close(fl.fail)
			}
			await(t, h.lc.Events().ShutdownInitiated)
			lameduck.Signal(h.lc, syscall.SIGTERM)
			h.logged(t, "SIGTERM ignored: the shutdown sequence runs to completion", "the signal was not logged as ignored")
			h.timers(1)
			if n := h.clock.Advance(4*time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
				t.Fatalf("the signal shortened the window (%d timer(s) fired)", n)
			}
			h.clock.Advance(time.Nanosecond)
			err := h.wait()
			if (start == "fatal error") != (err != nil) {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}

// "With LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true, a second signal exits at once
// … level=ERROR msg="lameduck: second SIGINT: exiting now without finishing
// the drain" setting="LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true" in_flight=0".
func TestSecondSignalExitIsLogged(t *testing.T) {
	secondSignalExits(t, syscall.SIGTERM, "SIGTERM")
}

// secondSignalExits sends sig, named name, twice to a serving Lifecycle
// with ExitOnSecondSignal and a 4s window: the second exits at once with
// 128+sig and logs the ERROR line; the drain still runs to its end.
func secondSignalExits(t *testing.T, sig syscall.Signal, name string) {
	t.Helper()
	h := newHarness(t, lameduck.Config{ShutdownDelay: 4 * time.Second, ExitOnSecondSignal: true})
	exited := make(chan int, 1)
	lameduck.SetExit(h.lc, func(code int) { exited <- code })
	h.serve(okHandler)
	h.start(t)
	lameduck.Signal(h.lc, sig)
	lameduck.Signal(h.lc, sig)
	if code := recv(t, exited, "exit"); code != 128+int(sig) {
		t.Fatalf("exit(%d), want %d (128 + %s)", code, 128+int(sig), name)
	}
	h.logged(t, `level=ERROR msg="lameduck: second `+name+`: exiting now without finishing the drain" setting="LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true" in_flight=0`, "the log lacks the second signal's line")
	h.timers(1)
	h.clock.Advance(4 * time.Second)
	h.waitOK(t)
}
