package health

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// pingCtx is the context a check's Func receives: the launching probe's
// values, none of its cancellation, and the ping's deadline.
//
// It is built lazily. Deadline and Value cost nothing; only a Func that asks
// for Done (a driver that selects on it, a child context) or for Err after
// the deadline gets a real context with a timer, made then. A trivial check
// that returns at once never costs the ping a timer, a channel or a
// context allocation.
//
// Once made, the real context is context.WithDeadline over
// context.WithoutCancel of the probe's context, and Done, Err and Value
// delegate to it; so a child context (context.WithTimeout(ctx, …),
// context.AfterFunc) finds the standard cancelCtx through Value and
// registers with it directly, starting no goroutine. After release (the
// ping has returned) a real context is canceled, and one made afterwards is
// canceled from the start: the context of a returned ping is done, as with
// context.WithTimeout and its cancel.
//
// It is safe for concurrent use: the Func may hand it to goroutines of its
// own.
type pingCtx struct {
	parent   context.Context // the launching probe's context; values only
	deadline time.Time

	// state is lazy until a real context is made, then made; released
	// once the ping has returned. release of a lazy context is one
	// compare-and-swap: no lock, as nothing needs canceling.
	state atomic.Int32

	mu     sync.Mutex
	real   context.Context    // guarded by mu; nil until needed
	cancel context.CancelFunc // guarded by mu
	values context.Context    // guarded by mu: WithoutCancel(parent), made on the first Value
}

const (
	ctxLazy int32 = iota
	ctxMade
	ctxReleased
)

func (c *pingCtx) init(parent context.Context, deadline time.Time) {
	c.parent, c.deadline = parent, deadline
}

func (c *pingCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *pingCtx) Done() <-chan struct{} { return c.get().Done() }

// Err is nil before the deadline when no real context exists yet, and the
// real context's error otherwise; asking after the deadline makes the real
// context, so that Err non-nil always goes with Done closed.
func (c *pingCtx) Err() error {
	if c.state.Load() == ctxLazy && time.Now().Before(c.deadline) {
		return nil
	}
	return c.get().Err()
}

func (c *pingCtx) Value(key any) any {
	c.mu.Lock()
	v := c.real
	if v == nil {
		if c.values == nil {
			c.values = context.WithoutCancel(c.parent)
		}
		v = c.values
	}
	c.mu.Unlock()
	return v.Value(key)
}

// get returns the real context, making it on first use.
func (c *pingCtx) get() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real == nil {
		if c.values == nil {
			c.values = context.WithoutCancel(c.parent)
		}
		c.real, c.cancel = context.WithDeadline(c.values, c.deadline)
		if !c.state.CompareAndSwap(ctxLazy, ctxMade) { // released meanwhile
			c.cancel()
		}
	}
	return c.real
}

// release cancels the context once the ping has returned, stopping its
// timer if it has one.
func (c *pingCtx) release() {
	if c.state.CompareAndSwap(ctxLazy, ctxReleased) {
		return // never made: a context made from now on is canceled from the start
	}
	c.mu.Lock()
	c.state.Store(ctxReleased)
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// String names the context as the standard ones do (fmt.Sprint(ctx)).
func (c *pingCtx) String() string { return "health.pingContext" }
