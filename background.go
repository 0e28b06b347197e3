package lameduck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// registry counts the background tasks of one Lifecycle by name, so the join
// can wait for them under one budget and name the ones that overran.
type registry struct {
	mu      sync.Mutex
	running map[string]int // tasks running, by name; guarded by mu
	total   int            // sum of running; guarded by mu
	ended   int            // tasks that have returned, ever; guarded by mu
	idle    chan struct{}  // closed while total == 0; guarded by mu
	loops   bool           // loops refused (the signal came); guarded by mu
	joined  bool           // everything refused (the join is over); guarded by mu
}

func newRegistry() *registry {
	idle := make(chan struct{})
	close(idle)
	return &registry{running: map[string]int{}, idle: idle}
}

// enter counts one task in, unless the registry refuses it.
func (r *registry) enter(name string, loop bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.joined:
		return errJoined
	case loop && r.loops:
		return ErrShuttingDown
	}
	if r.total == 0 {
		r.idle = make(chan struct{})
	}
	r.running[name]++
	r.total++
	return nil
}

func (r *registry) leave(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[name]--; r.running[name] == 0 {
		delete(r.running, name)
	}
	r.ended++
	if r.total--; r.total == 0 {
		close(r.idle)
	}
}

// count returns how many tasks are running and how many have ended.
func (r *registry) count() (running, ended int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total, r.ended
}

// used reports whether any background task was ever started.
func (r *registry) used() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total+r.ended > 0
}

func (r *registry) refuseLoops() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loops = true
}

// idleCh returns a channel closed when no task is running; a task that
// starts another before it ends keeps it open, so waiting on it re-reads
// the registry until it is empty.
func (r *registry) idleCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idle
}

// close refuses all further work and returns what is still running, as
// "audit-row ×3, invite-email ×1" (sorted by name) and the count.
func (r *registry) close() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.joined = true
	names := make([]string, 0, len(r.running))
	for n := range r.running {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s ×%d", n, r.running[n])
	}
	return strings.Join(parts, ", "), r.total
}

// GoWrite starts fn as a named best-effort background write: an audit row, a last_used_at stamp, an invitation email.
//
// ctx carries the write's own deadline, timeout (a time.Duration; zero means
// no deadline of its own, negative is an error), and is never cancelled by
// the shutdown: the point is to let the last write finish inside the grace
// period. Writes are still started while the pod drains (requests are
// answered until teardown ends, so the audit row of a mutation answered 200
// during a rolling update must be covered) and the background join waits
// for them, re-reading the registry until it is empty, so a write started by
// a task being joined is joined too, out of the same budget.
//
// A non-nil error from fn is logged with the task's name; a panic is
// recovered, logged with its stack and handed to Config.OnPanic; the
// process lives on.
//
// GoWrite returns an error wrapping ErrShuttingDown, and logs the refusal,
// once the join is over.
// It is safe for concurrent use and does not block.
func (l *Lifecycle) GoWrite(name string, timeout time.Duration, fn func(ctx context.Context) error) error {
	if err := l.admitTask("GoWrite", "write", name, timeout, fn); err != nil {
		return err
	}
	go func() {
		defer l.bg.leave(name)
		ctx, cancel := l.withTimeout(context.Background(), timeout)
		defer cancel()
		l.runTask("write", name, ctx, fn)
	}()
	return nil
}

// GoLoop starts fn as a named long-running background task: a sweep, a lease campaign. ctx is cancelled when the
// shutdown sequence starts; the background join then waits for fn to
// return, so the process never exits between a claim and its release.
//
// GoLoop returns ErrShuttingDown once the sequence has started (an error
// wrapping it, which says so, once the join is over); the refusal is
// logged. Errors and
// panics from fn are handled as in GoWrite. It is safe for concurrent use
// and does not block.
func (l *Lifecycle) GoLoop(name string, fn func(ctx context.Context) error) error {
	if err := l.admitTask("GoLoop", "loop", name, 0, fn); err != nil {
		return err
	}
	go func() {
		defer l.bg.leave(name)
		l.runTask("loop", name, l.loopCtx, fn)
	}()
	return nil
}

// admitTask checks the arguments of a background task of kind ("write" or
// "loop", started by method) and enters it in the registry. A refusal by
// the registry is logged, a write's as a warning and a loop's as
// information, and returned.
func (l *Lifecycle) admitTask(method, kind, name string, timeout time.Duration, fn func(context.Context) error) error {
	switch {
	case name == "":
		return fmt.Errorf("lameduck: %s: empty task name; name the task so an overrun can be named", method)
	case timeout < 0:
		return fmt.Errorf("lameduck: %s(%q): timeout=%s is negative; use 0 for no deadline of its own", method, name, timeout)
	case fn == nil:
		return fmt.Errorf("lameduck: %s(%q): nil function", method, name)
	}
	loop := kind == "loop"
	if err := l.bg.enter(name, loop); err != nil {
		level := slog.LevelWarn
		if loop {
			level = slog.LevelInfo
		}
		l.log.Log(context.Background(), level, "lameduck: background "+kind+" refused: "+err.Error(), "task", name)
		return err
	}
	return nil
}

// runTask runs one background task, recovering a panic.
func (l *Lifecycle) runTask(kind, name string, ctx context.Context, fn func(context.Context) error) {
	defer func() {
		if v := recover(); v != nil {
			l.panicked(kind+" "+name, v, debug.Stack())
		}
	}()
	if err := fn(ctx); err != nil && !(kind == "loop" && errors.Is(err, context.Canceled) && l.loopCtx.Err() != nil) {
		l.log.Warn("lameduck: background "+kind+" failed", "task", name, "error", err.Error())
	}
}

// panicked logs a recovered panic and hands it to Config.OnPanic.
func (l *Lifecycle) panicked(what string, v any, stack []byte) {
	l.log.Error(fmt.Sprintf("lameduck: panic in %s: %v", what, v), "stack", string(stack))
	if l.cfg.OnPanic != nil {
		func() {
			defer func() { _ = recover() }() // a broken hook must not kill the process either
			l.cfg.OnPanic(what, v, stack)
		}()
	}
}

// withTimeout is context.WithTimeout on the Lifecycle's clock; d == 0 means
// no deadline.
func (l *Lifecycle) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(parent)
	}
	if _, ok := l.clock.(systemClock); ok {
		return context.WithTimeout(parent, d)
	}
	// The timer is stopped however the context ends (its cancel func, or
	// the parent's end), so an injected clock never keeps a dead deadline
	// pending.
	inner, cancel := context.WithCancelCause(parent)
	ctx := &clockDeadlineCtx{Context: inner, at: l.clock.Now().Add(d)}
	t := l.clock.NewTimer(d)
	go func() {
		select {
		case <-t.C():
			ctx.expired.Store(true)
			cancel(context.DeadlineExceeded)
		case <-inner.Done():
			t.Stop()
		}
	}()
	return ctx, func() { t.Stop(); cancel(context.Canceled) }
}

// clockDeadlineCtx is a context whose deadline is kept by an injected
// clock. It answers as context.WithTimeout's does, so code under test sees
// what it sees in production: Deadline reports the deadline, and Err is
// context.DeadlineExceeded once the clock has reached it (a hook returning
// ctx.Err() at its deadline is an overrun on either clock). Contexts
// derived from it learn of its end through Done and take that Err.
type clockDeadlineCtx struct {
	context.Context
	at      time.Time
	expired atomic.Bool // set before the context is cancelled
}

func (c *clockDeadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

func (c *clockDeadlineCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// join waits for every background task, up to budget, then refuses all new
// work. capped says JoinBudget set the bound, rather than what the teardown
// had left. When tasks are still running at the bound, one warning names
// each with its count, the bound and the setting that widens it, and join
// returns an error wrapping context.DeadlineExceeded: the process is about
// to exit, and the work is abandoned.
func (l *Lifecycle) join(budget time.Duration, capped bool) error {
	began := l.clock.Now()
	waiting, ended0 := l.bg.count()
	t := l.clock.NewTimer(budget)
	defer t.Stop()
	select {
	case <-l.bg.idleCh():
	case <-t.C():
	}
	used := l.bg.used()
	running, n := l.bg.close()
	_, ended1 := l.bg.count()
	joined := ended1 - ended0 // includes writes asked for during the join
	took := l.clock.Now().Sub(began).Round(time.Millisecond)
	defer l.events.Joined.fire()
	if n == 0 {
		if used {
			l.log.Info(fmt.Sprintf("lameduck: join done — every background task finished (%d joined)", joined),
				"took", took.String(), "joined", joined, "waited_for", waiting)
		}
		return nil
	}
	budget = budget.Round(time.Millisecond)
	setting, widen := l.cfg.EnvPrefix+"SHUTDOWN_TEARDOWN", "what the teardown budget left"
	fix := "raise " + setting + " (and terminationGracePeriodSeconds with it)"
	if capped {
		setting = l.cfg.EnvPrefix + "JOIN_BUDGET"
		widen = "the cap " + setting
		fix = "raise or unset " + setting
	}
	l.transition(Transition{Kind: TransitionAbandoned, At: l.clock.Now(), Count: n})
	l.log.Error(fmt.Sprintf("lameduck: join: %s spent; still running: %s — abandoned at exit after %s; %s",
		budget, running, widen, fix),
		"budget", budget.String(), "joined", joined, "still_running", n, "setting", setting)
	return fmt.Errorf("lameduck: background join: %d task(s) abandoned (%s): %w", n, running, context.DeadlineExceeded)
}
