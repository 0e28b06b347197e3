package lameduck

import (
	"fmt"
	"time"
)

// window returns the length of this run's fixed lame-duck window: the
// configured delay, or zero when the sequence started before the pod was
// ever ready (it is in no endpoint, so there is nothing to wait for).
func (l *Lifecycle) window() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.skipWindow {
		return 0
	}
	return l.cfg.window()
}

// lameDuckWindow waits from start, the signal, until the window ends: after
// the delay in DrainDelay mode; in DrainIdle mode when traffic has been idle
// for IdleWindow, no earlier than the delay and no later than DrainTimeout
// (docs/probes-and-shutdown.md, "The lame-duck window: delay and idle modes").
//
// The idle wait sleeps until the exact instant idleness could end and
// checks again, so it ends within a timer's precision of the idle window's
// end, not on a polling tick.
func (l *Lifecycle) lameDuckWindow(start time.Time) {
	delay := l.window()
	if l.cfg.DrainMode != DrainIdle || l.skipWindowed() {
		l.sleepUntil(start.Add(delay))
		return
	}
	idle, bound := l.cfg.IdleWindow, start.Add(l.cfg.DrainTimeout)
	for {
		now := l.clock.Now()
		if !now.Before(bound) {
			busy, last := l.track.activity()
			why := fmt.Sprintf("%d request(s) still in flight", busy)
			if busy == 0 {
				why = "traffic within the last " + l.cfg.IdleWindow.String()
			}
			l.log.Warn(fmt.Sprintf("lameduck: idle drain bound %s reached (%s); tearing down", l.cfg.DrainTimeout, why),
				"in_flight", busy, "last_activity_ago", now.Sub(last).Round(time.Millisecond).String(),
				"setting", l.cfg.EnvPrefix+"DRAIN_TIMEOUT")
			return
		}
		busy, last := l.track.activity()
		next := now.Add(idle) // something in flight: it ends no earlier than now
		if busy == 0 {
			end := last.Add(idle)
			if min := start.Add(delay); end.Before(min) {
				end = min
			}
			if !now.Before(end) {
				msg := "lameduck: idle drain done — no traffic for " + idle.String()
				if last.IsZero() {
					msg = "lameduck: idle drain done — no application traffic since the start; the shutdown delay has passed"
				}
				l.log.Info(msg,
					"since_signal", now.Sub(start).Round(time.Millisecond).String(), "idle_window", idle.String())
				return
			}
			next = end
		}
		if next.After(bound) {
			next = bound
		}
		l.sleepUntil(next)
	}
}

// skipWindowed reports whether the window was skipped because the pod was
// never ready.
func (l *Lifecycle) skipWindowed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skipWindow
}

// sleepUntil waits on the Lifecycle's clock until t.
func (l *Lifecycle) sleepUntil(t time.Time) {
	d := t.Sub(l.clock.Now())
	if d <= 0 {
		return
	}
	tm := l.clock.NewTimer(d)
	defer tm.Stop()
	<-tm.C()
}
