package testsupport

import (
	"context"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// Guard is how long the helpers below wait before failing t: a hang guard,
// not a synchronisation. What they wait for takes milliseconds when the
// code works; a test whose code under test never delivers fails naming
// what it waited for, instead of deadlocking until the binary's timeout.
const Guard = 10 * time.Second

// Recv receives from ch, or fails t after Guard of real time.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Guard)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %s for %s", Guard, what)
		var zero T
		return zero
	}
}

// Await waits until ev has fired, or fails t after Guard of real time.
func Await(t testing.TB, ev *lameduck.Event) {
	t.Helper()
	Recv(t, ev.Done(), "event "+ev.Name())
}

// Timers waits until clk has at least n pending timers (the code under
// test has started waiting on it), or fails t after Guard of real time.
func Timers(t testing.TB, clk *lameducktest.Clock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Guard)
	defer cancel()
	if err := clk.WaitForTimers(ctx, n); err != nil {
		t.Fatalf("waiting for %d timer(s) on the fake clock (have %d): %v", n, clk.Pending(), err)
	}
}

// Context returns a context that ends after d of real time, or when t's
// cleanup runs: for a call that must not hang the test when the code under
// test never answers. Use a d well beyond what the call needs.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
