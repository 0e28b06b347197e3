package health

import (
	"context"
	"math/rand/v2"
	"time"
)

// RunRefresh pings the checks that have Refresh set and a MaxAge above
// zero on their own schedule, until ctx ends, then returns. It is for
// services that want probes to cost no ping at all: each such check is
// pinged about every MaxAge, a little before its last result expires (at a
// random point between 80% and 95% of MaxAge after that result), and first
// at a random point within one MaxAge of the start, so that the pods of a
// fleet, started together, do not ping a shared dependency in step.
//
// A refresh is a ping like a probe's, under the same rules: single-flight
// with the probes (a probe that comes while it runs joins it), the check's
// deadline, never launched while an earlier ping is captive (it is tried
// again one MaxAge later), panics recovered. A check with Refresh added
// while RunRefresh runs wakes it, and is first pinged within one MaxAge of
// being added, as the others were within one of the start. RunRefresh
// starts no goroutine that outlives it but the pings themselves (one per
// check at most, see [Checker]); it returns when ctx ends, and at once when
// no check has Refresh set and a MaxAge above zero (run it again once one
// is added). Run one at a time per Checker: lameduck runs it from the
// moment the pod serves and stops it at the shutdown signal, so a draining
// pod pings nothing.
func (c *Checker) RunRefresh(ctx context.Context) {
	c.mu.Lock()
	wake := c.refreshWakeLocked()
	c.mu.Unlock()
	due := map[*checkState]time.Time{}
	var tm *time.Timer
	defer func() {
		if tm != nil {
			tm.Stop()
		}
	}()
	for ctx.Err() == nil {
		now := time.Now()
		var next time.Time
		var sel []*entry
		if reg := c.reg.Load(); reg != nil {
			for _, e := range reg.entries {
				cs := e.check
				if cs == nil || !cs.Refresh || cs.maxAge <= 0 {
					continue
				}
				d, ok := due[cs]
				if !ok {
					d = now.Add(rand.N(cs.maxAge))
					due[cs] = d
				}
				if !now.Before(d) {
					sel = append(sel, e)
				} else if next.IsZero() || d.Before(next) {
					next = d
				}
			}
		}
		if len(sel) > 0 {
			c.probe(ctx, sel, make([]Result, len(sel)), false)
			for _, e := range sel {
				d := e.check.nextRefresh()
				due[e.check] = d
				if next.IsZero() || d.Before(next) {
					next = d
				}
			}
		}
		if next.IsZero() {
			return // nothing to refresh
		}
		wait := time.Until(next)
		if tm == nil {
			tm = time.NewTimer(wait)
		} else {
			tm.Reset(wait)
		}
		select {
		case <-ctx.Done():
		case <-tm.C:
		case <-wake: // a check to refresh was added: schedule it (Reset discards the timer's old tick)
		}
	}
}

// nextRefresh returns when the check should be refreshed next: a random
// point between 80% and 95% of MaxAge after its last result, or one MaxAge
// from now when it has none (its ping is captive).
func (cs *checkState) nextRefresh() time.Time {
	cs.mu.Lock()
	last, captive := cs.result.Time, cs.cur != nil
	cs.mu.Unlock()
	if last.IsZero() || captive {
		return time.Now().Add(cs.maxAge)
	}
	return last.Add(cs.maxAge*8/10 + rand.N(max(cs.maxAge*15/100, 1)))
}
