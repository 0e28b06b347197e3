package lameduck

import (
	"time"

	"github.com/lameduck/lameduck/health"
)

// AddCheck registers a readiness check: a dependency pinged by every
// /readyz probe while the pod serves, concurrently with the others, under
// its own deadline (ch.Timeout, or Config.CheckTimeout). A Critical check
// that fails makes /readyz 503 "failed"; any other failure makes it 200
// "degraded", so an outage of a shared dependency never removes every pod
// from the Service at once (docs/probes-and-shutdown.md, "Readiness
// checks"). /readyz/<name> answers for one check.
//
// Liveness never runs a check, and from the shutdown signal on readiness
// answers 503 "draining" without running any. Panics, wedged
// pings and probe storms are handled as health.Checker documents.
//
// With a MaxAge (ch.MaxAge, or Config.CheckMaxAge), probes within MaxAge of
// the last answered ping read its result instead of pinging; with Refresh
// too, the check is pinged on its own schedule from the moment the pod
// serves (or from AddCheck, for a check added while it serves) until the
// shutdown signal (docs/probes-and-shutdown.md, "A ping budget per
// dependency"). The refresh is the Lifecycle's own work, not a background
// task: it stops at the signal, and the teardown keeps no share of its
// budget for it.
//
// It returns the Checker's error for a bad or duplicate name, a nil Func or
// a negative Timeout. It is safe for concurrent use, also while probes run.
func (l *Lifecycle) AddCheck(ch health.Check) error {
	if err := l.checks.AddCheck(ch); err != nil {
		return err
	}
	if ch.Refresh {
		l.refreshChecks.Store(true)
		l.startRefresh() // nothing unless the pod serves: then it starts once serving begins
	}
	return nil
}

// AddGate registers a readiness gate: a predicate over state the
// application keeps in memory, such as "this backend group's consensus set
// is non-empty", that fails readiness like a critical check, or declares
// itself not applicable and is skipped. It is evaluated on every /readyz
// probe while the pod serves, in the probe's goroutine, so it must only read
// memory. It returns an error for a bad or duplicate name or a nil Func.
func (l *Lifecycle) AddGate(g health.Gate) error { return l.checks.AddGate(g) }

// startRefresh runs Checker.RunRefresh, which pings the checks with
// Refresh on their own schedule, from the moment the pod serves until the
// shutdown signal (the loops' context), once such a check exists: it is
// called when the phase becomes serving and by AddCheck for each check with
// Refresh, so one added while serving is refreshed too. It is a goroutine
// of the Lifecycle's own, not background work: the teardown keeps no share
// of its budget for it. RunRefresh returns when it finds nothing to
// refresh; a check added meanwhile makes it look again.
func (l *Lifecycle) startRefresh() {
	if !l.refreshChecks.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.initiated || l.Phase() != PhaseServing:
		return
	case l.refreshing:
		l.refreshAll = true // RunRefresh is woken too (Checker.AddCheck); this covers its return
		return
	}
	l.refreshing = true
	l.refreshWG.Go(func() {
		for {
			l.checks.RunRefresh(l.loopCtx)
			l.mu.Lock()
			again := l.refreshAll && l.loopCtx.Err() == nil
			l.refreshAll, l.refreshing = false, again
			l.mu.Unlock()
			if !again {
				return
			}
		}
	})
}

// awaitRefresh waits for the refresh goroutine, which returns as soon as
// the signal has cancelled its context (a ping still running is left to
// the probes' rules), up to the end of the overall bound.
func (l *Lifecycle) awaitRefresh(start time.Time) {
	l.mu.Lock()
	running := l.refreshing // false: it never ran, or it is returning
	l.mu.Unlock()
	if !running {
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); l.refreshWG.Wait() }()
	t := l.clock.NewTimer(max(start.Add(l.cfg.maxWindow()+l.cfg.ShutdownTeardown).Sub(l.clock.Now()), 0))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		l.log.Warn("lameduck: the readiness refresh is still running at exit")
	}
}
