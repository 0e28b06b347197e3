package health_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// logBuf is a concurrency-safe log sink whose lines the tests count.
type logBuf struct{ testsupport.LogBuffer }

// count returns how many log lines contain every one of subs.
func (l *logBuf) count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// quiet is a logger that drops everything.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func mustAdd(t testing.TB, c *health.Checker, ch health.Check) {
	t.Helper()
	if err := c.AddCheck(ch); err != nil {
		t.Fatal(err)
	}
}

// mustRun runs every check. It reports an error with t.Errorf, never
// t.Fatal, because probes run on goroutines of their own in many tests and
// t.Fatal must only be called from the test's goroutine; the zero Report it
// then returns fails the caller's assertions.
func mustRun(t testing.TB, c *health.Checker, ctx context.Context) health.Report {
	t.Helper()
	rep, err := c.Run(ctx, "", nil)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	return rep
}

// counted returns a check's Func that adds 1 to calls, then sleeps d as
// sleepy does and returns nil.
func counted(calls *atomic.Int32, d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		calls.Add(1)
		return sleepy(d, nil)(ctx)
	}
}

// sleepy returns a check that answers err after d, or ctx.Err() when its
// context ends first.
func sleepy(d time.Duration, err error) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wedge returns a check that ignores its context and returns only when
// release is closed, counting its calls.
func wedge(release <-chan struct{}, calls *atomic.Int32) func(context.Context) error {
	return func(context.Context) error {
		calls.Add(1)
		<-release
		return nil
	}
}
