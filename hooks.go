package lameduck

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

type namedFunc struct {
	name string
	fn   func(context.Context) error
}

// AddTeardownHook registers a named step of the application's own that the
// teardown runs as soon as the lame-duck window ends, beside the HTTP
// drain, and waits for before the background join (the timeline [Events]
// defines): a job dispatcher releasing its claims, a run console finishing
// its runs (docs/probes-and-shutdown.md, "The shutdown sequence"). Hooks run
// one after the other in the order they were added; Events.HooksDone fires
// when they are over.
//
// Together they get at most Config.HookShare (default ⅔) of the teardown
// budget, so in-flight HTTP requests keep the rest; ctx carries that
// deadline. A hook that returns an error, or is still running at the
// deadline, is named once in the log, the sequence moves on, and Run's
// error wraps context.DeadlineExceeded for an overrun. A hook that ignores
// its context is not waited for past its deadline. A panic is recovered and
// handed to Config.OnPanic.
//
// AddTeardownHook returns ErrShuttingDown once the shutdown sequence has
// started, and an error for an empty name or a nil fn. It is safe for
// concurrent use.
func (l *Lifecycle) AddTeardownHook(name string, fn func(ctx context.Context) error) error {
	return l.addFunc(&l.hooks, "AddTeardownHook", name, fn)
}

// AddCloser registers a named closer (a database pool, a client, a tracer)
// that runs after the background join, in reverse order of registration, so
// no background task ever writes to a closed store. Each closer gets an
// equal share of what is left of the teardown budget, carried by ctx; one
// that overruns its share is named in the log and the next one runs.
//
// AddCloser returns ErrShuttingDown once the shutdown sequence has
// started, and an error for an empty name or a nil fn. It is safe for
// concurrent use.
func (l *Lifecycle) AddCloser(name string, fn func(ctx context.Context) error) error {
	return l.addFunc(&l.closers, "AddCloser", name, fn)
}

func (l *Lifecycle) addFunc(list *[]namedFunc, method, name string, fn func(context.Context) error) error {
	if name == "" || fn == nil {
		return fmt.Errorf("lameduck: %s(%q): a name and a function are both required", method, name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.initiated {
		return ErrShuttingDown
	}
	*list = append(*list, namedFunc{name, fn})
	return nil
}

// callUntil runs fn with a context that ends at deadline and waits for it
// no longer than that. It reports fn's error, or context.DeadlineExceeded
// when fn was still running at the deadline.
func (l *Lifecycle) callUntil(kind string, f namedFunc, deadline time.Time) error {
	ctx, cancel := l.withTimeout(context.Background(), max(deadline.Sub(l.clock.Now()), time.Nanosecond))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				l.panicked(kind+" "+f.name, v, debug.Stack())
				done <- fmt.Errorf("panic: %v", v)
			}
		}()
		done <- f.fn(ctx)
	}()
	if ok, err := resultBy(ctx, done); ok {
		return err
	}
	return context.DeadlineExceeded
}

// resultBy waits for a result on res until ctx ends. A result ready as ctx
// ends wins (the function returned as its context ended); ok is false when
// ctx ended with no result.
func resultBy(ctx context.Context, res <-chan error) (ok bool, err error) {
	select {
	case err := <-res:
		return true, err
	case <-ctx.Done():
	}
	select {
	case err := <-res:
		return true, err
	default:
		return false, nil
	}
}
