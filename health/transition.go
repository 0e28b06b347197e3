package health

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// logLine is a log record built under a lock and emitted after it is
// released (no lock is held across I/O).
type logLine struct {
	at    time.Time // when the change was decided, under the lock
	level slog.Level
	msg   string
	attrs []slog.Attr
}

// emit writes l, if any, to the Checker's logger, stamped with the time the
// change was decided rather than the time it is written: lines of one check
// decided by concurrent probes may reach the log out of order, but their
// timestamps are in the order of the changes.
func (c *Checker) emit(l *logLine) {
	if l == nil {
		return
	}
	h := c.logger().Handler()
	ctx := context.Background()
	if !h.Enabled(ctx, l.level) {
		return
	}
	at := l.at
	if at.IsZero() {
		at = time.Now()
	}
	r := slog.NewRecord(at, l.level, l.msg, 0)
	r.AddAttrs(l.attrs...)
	_ = h.Handle(ctx, r)
}

// transition records now as the state of the check or gate whose last
// logged outcome *last points to, and returns the line that says the
// change, or nil when there is no change. So the log says each transition
// once (ok → error, error → ok, → timeout, → stalled, → panic), not once per
// probe; a change of error text alone is not a transition. The first
// outcome is said only when it is not a pass. The caller holds the lock that
// guards *last.
func transition(last *Outcome, kind, name string, critical bool, now Outcome, logText string, extra ...slog.Attr) *logLine {
	prev := *last
	if now == prev {
		return nil
	}
	*last = now
	if prev == "" && now.Passing() {
		return nil
	}
	attrs := make([]slog.Attr, 0, 5+len(extra))
	attrs = append(attrs, slog.String(kind, name))
	if prev != "" {
		attrs = append(attrs, slog.String("previous", string(prev)))
	}
	l := &logLine{at: time.Now(), level: slog.LevelWarn}
	switch now {
	case OutcomeOK:
		l.level, l.msg = slog.LevelInfo, fmt.Sprintf("health: %s %s is ok again", kind, name)
	case OutcomeSkipped:
		l.level, l.msg = slog.LevelInfo, fmt.Sprintf("health: %s %s does not apply; skipped", kind, name)
	case OutcomeError, OutcomeFailed:
		l.msg = fmt.Sprintf("health: %s %s is failing", kind, name)
	case OutcomeTimeout:
		l.msg = fmt.Sprintf("health: %s %s timed out", kind, name)
	case OutcomeStalled:
		l.msg = fmt.Sprintf("health: %s %s is stalled: its earlier ping has not returned; it is not launched again until it does", kind, name)
	case OutcomePanic:
		l.level, l.msg = slog.LevelError, fmt.Sprintf("health: %s %s panicked; recovered", kind, name)
	}
	if !now.Passing() {
		attrs = append(attrs, slog.Bool("critical", critical), slog.String("result", logText))
	}
	l.attrs = append(attrs, extra...)
	return l
}

// hookSlot serialises the OnPanic calls of one check.
type hookSlot struct {
	mu      sync.Mutex
	running bool          // guarded by mu: a goroutine is calling OnPanic for the check
	pending *pendingPanic // guarded by mu: the latest panic that came meanwhile
}

type pendingPanic struct {
	value any
	stack []byte
}

// reportPanic hands a recovered panic to CheckerOptions.OnPanic, surviving a
// hook that panics itself.
//
// One call at a time per check: a hook that blocks (an error tracker
// flushing) must not keep a goroutine per probe alive. A panic that comes
// while a call for the same check is running is handed over by that
// goroutine once its call returns; of several that come meanwhile, only the
// latest is (the others are still logged and reported in bodies).
func (c *Checker) reportPanic(name string, value any, stack []byte) {
	if c.opts.OnPanic == nil {
		return
	}
	v, _ := c.hooking.LoadOrStore(name, new(hookSlot))
	slot := v.(*hookSlot)
	slot.mu.Lock()
	if slot.running {
		slot.pending = &pendingPanic{value, stack}
		slot.mu.Unlock()
		return
	}
	slot.running = true
	slot.mu.Unlock()
	for {
		c.callOnPanic(name, value, stack)
		slot.mu.Lock()
		p := slot.pending
		slot.pending = nil
		if p == nil {
			slot.running = false
			slot.mu.Unlock()
			return
		}
		slot.mu.Unlock()
		value, stack = p.value, p.stack
	}
}

func (c *Checker) callOnPanic(name string, value any, stack []byte) {
	defer func() {
		if v := recover(); v != nil {
			c.logger().Error("health: CheckerOptions.OnPanic panicked; recovered", "check", name, "panic", fmt.Sprint(v))
		}
	}()
	c.opts.OnPanic(name, value, stack)
}
