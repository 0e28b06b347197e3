package lameduck_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

// On the fake clock a teardown hook that returns ctx.Err() at its deadline
// is an overrun, as it is in production (context.WithTimeout's Err is
// context.DeadlineExceeded there): the hook's share ends, the overrun is
// named, and Run fails.
func TestHookReturningCtxErrAtItsDeadlineIsAnOverrun(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second})
	entered := make(chan struct{})
	deadlines := make(chan bool, 1)
	if err := h.lc.AddTeardownHook("dispatcher", func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		deadlines <- ok
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	h.endWindow(time.Second)
	recv(t, entered, "the hook to run")
	if !recv(t, deadlines, "the hook's deadline") {
		t.Error("the hook's context has no deadline; want the hooks' share, as in production")
	}
	await(t, h.lc.Events().HTTPDrained)
	h.timers(1)
	h.clock.Advance(20 * time.Second) // ⅔ of 30s
	err := h.wait()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"dispatcher"`) {
		t.Fatalf("Run = %v; want the hook's overrun (context.DeadlineExceeded, naming it)", err)
	}
}
