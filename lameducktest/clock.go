// Package lameducktest helps test code that uses lameduck, so a service's
// own drain is tested exactly and fast: a fake [Clock] that tests advance by
// hand (a lame-duck window of 5s or a teardown budget of 30s passes in
// microseconds and exactly), [Configure] to set a lameduck.Config on that
// clock with no signals and no environment (lameduck.New then builds the
// Lifecycle from it, as in the code under test), [Start] to run it, and
// [EndWindow] to take it through the window.
//
// It imports only the standard library and lameduck.
package lameducktest

import (
	"context"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
)

// Clock is a fake [lameduck.Clock]. Time stands still until [Clock.Advance]
// moves it; timers whose deadline is reached fire in deadline order.
//
// Create one with [NewClock]; the zero value is not usable. All methods are
// safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	changed *sync.Cond // broadcast when timers are added, stopped or fired; guarded by mu
	now     time.Time  // guarded by mu
	timers  []*timer   // pending timers; guarded by mu
}

// NewClock returns a fake clock that reads start until advanced.
func NewClock(start time.Time) *Clock {
	c := &Clock{now: start}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now returns the fake current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock has been advanced by d.
// A d of zero or less fires at once.
func (c *Clock) NewTimer(d time.Duration) lameduck.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.changed.Broadcast()
	return t
}

// Advance moves the clock forward by d and fires, in deadline order, every
// timer whose deadline has been reached. It returns how many it fired, so a
// test can assert exactly that nothing fired before its time (Advance(d -
// 1ns) returning 0), where checking an event right after Advance would race
// the goroutine that the timer wakes.
func (c *Clock) Advance(d time.Duration) (fired int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.now.Add(d)
	for {
		next := -1
		for i, t := range c.timers {
			if !t.at.After(end) && (next < 0 || t.at.Before(c.timers[next].at)) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		t := c.timers[next]
		c.timers = append(c.timers[:next], c.timers[next+1:]...)
		if t.at.After(c.now) {
			c.now = t.at
		}
		t.ch <- c.now
		fired++
	}
	c.now = end
	c.changed.Broadcast()
	return fired
}

// Pending returns how many timers are waiting to fire.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are pending, which is how a
// test knows the code under test has started waiting (for its window, say)
// before it advances the clock. It returns ctx's error if ctx ends first.
func (c *Clock) WaitForTimers(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.changed.Broadcast()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.changed.Wait()
	}
	return nil
}

// dueLocked reports whether a pending timer is due at exactly at.
func (c *Clock) dueLocked(at time.Time) bool {
	for _, t := range c.timers {
		if t.at.Equal(at) {
			return true
		}
	}
	return false
}

type timer struct {
	c  *Clock
	ch chan time.Time
	at time.Time // immutable
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, p := range t.c.timers {
		if p == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			t.c.changed.Broadcast()
			return true
		}
	}
	return false
}
