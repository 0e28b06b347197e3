package lameduck

import "github.com/lameduck/lameduck/health"

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
