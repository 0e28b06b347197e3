package lameduck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// lameDuckWindow waits from start, the signal, until the window ends and
// every drain wait has returned, or until the window's bound.
func (l *Lifecycle) lameDuckWindow(start time.Time) {
	l.mu.Lock()
	waits := append([]namedFunc(nil), l.waits...)
	l.mu.Unlock()
	if len(waits) == 0 {
		l.baseWindow(start)
		return
	}
	bound := start.Add(l.cfg.maxWindow())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.drainWaits(waits, start, bound)
	}()
	l.baseWindow(start)
	<-done
}

// drainWaits runs every drain wait until bound and logs how they ended.
func (l *Lifecycle) drainWaits(waits []namedFunc, start, bound time.Time) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var overran []string
	for _, w := range waits {
		wg.Go(func() {
			err := l.callUntil("drain wait", w, bound)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				mu.Lock()
				overran = append(overran, w.name)
				mu.Unlock()
			case err != nil:
				l.log.Warn("lameduck: drain wait "+w.name+" failed", "wait", w.name, "error", err.Error())
			}
		})
	}
	wg.Wait()
	took := l.clock.Now().Sub(start).Round(time.Millisecond).String()
	if len(overran) > 0 {
		slices.Sort(overran)
		l.log.Warn(fmt.Sprintf("lameduck: drain bound %s reached with %s still running; teardown begins", l.cfg.maxWindow(), strings.Join(overran, ", ")),
			"since_signal", took, "setting", l.cfg.EnvPrefix+"DRAIN_TIMEOUT")
		return
	}
	l.log.Info("lameduck: drain waits done", "waits", len(waits), "since_signal", took)
}

// baseWindow waits from start, the signal, until the window ends: after
// the delay in DrainDelay mode; in DrainIdle mode when traffic has been idle
// for IdleWindow, no earlier than the delay and no later than DrainTimeout
// (docs/probes-and-shutdown.md, "The lame-duck window: delay and idle modes").
//
// The idle wait sleeps until the exact instant idleness could end and
// checks again, so it ends within a timer's precision of the idle window's
// end, not on a polling tick.
func (l *Lifecycle) baseWindow(start time.Time) {
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
