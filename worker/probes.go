package worker

import (
	"net/http"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// answer answers the liveness and readiness probes first, in the
// Lifecycle's place (false: the Lifecycle answers); phase is the
// Lifecycle's at the probe.
func (w *Worker) answer(liveness bool, phase lameduck.Phase) (health.Report, bool) {
	if liveness {
		return w.liveness(phase)
	}
	return w.readiness(phase)
}

// liveness answers 503 stalled when an idle loop has stopped cycling, and
// leaves every other answer (200 ok) to the Lifecycle. From the signal on
// a loop stops cycling on purpose, and a liveness failure would kill the
// pod mid-drain: alive.
func (w *Worker) liveness(phase lameduck.Phase) (health.Report, bool) {
	if phase >= lameduck.PhaseDraining {
		return w.busyReport(w.clock.Now(), health.StatusOK, http.StatusOK, nil)
	}
	w.mu.Lock()
	loops := w.loops
	w.mu.Unlock()
	now := w.clock.Now()
	var worst *loop
	var worstIdle time.Duration
	worstSilent, stalled := 0, 0
	for _, l := range loops {
		idle, silent, ok := l.idle(now)
		if !ok || idle <= l.threshold {
			continue
		}
		stalled++
		if worst == nil || idle > worstIdle {
			worst, worstIdle, worstSilent = l, idle, silent
		}
	}
	if worst == nil {
		return w.busyReport(now, health.StatusOK, http.StatusOK, nil)
	}
	fields := map[string]any{
		"loop":      worst.Name,
		"idle_for":  worstIdle.Round(time.Second).String(),
		"threshold": worst.threshold.String(),
		"stalled":   stalled,
	}
	if worstSilent > 0 {
		fields["silent_fetches"] = worstSilent
	}
	return health.Report{Status: health.StatusStalled, Code: http.StatusServiceUnavailable, Fields: fields}, true
}

// busyReport answers with status and code plus, while jobs are in flight,
// "busy":true, their count, and the oldest one's loop, name and age
// as a Go duration to the millisecond ("job_age":"1h2m3.5s",
// "job_age":"412ms"); with no job in flight it leaves the answer to the
// Lifecycle (answered false) unless fields is set.
func (w *Worker) busyReport(now time.Time, status health.Status, code int, fields map[string]any) (health.Report, bool) {
	w.mu.Lock()
	loops := w.loops
	w.mu.Unlock()
	busy := 0
	var oldest *loop
	var oldestName string
	var oldestAge time.Duration
	for _, l := range loops {
		name, age, ok := l.busyAt(now)
		if !ok {
			continue
		}
		busy++
		if oldest == nil || age > oldestAge {
			oldest, oldestName, oldestAge = l, name, age
		}
	}
	if busy == 0 && fields == nil {
		return health.Report{}, false
	}
	if fields == nil {
		fields = map[string]any{}
	}
	fields["busy"], fields["jobs_in_flight"] = busy > 0, busy
	if oldest != nil {
		fields["loop"], fields["job"], fields["job_age"] = oldest.Name, oldestName, oldestAge.Round(time.Millisecond).String()
	}
	return health.Report{Status: status, Code: code, Fields: fields}, true
}

// readiness answers draining (with busy) from the signal on, and
// superseded while serving under a newer epoch; starting and the checks'
// answer are the Lifecycle's.
func (w *Worker) readiness(phase lameduck.Phase) (health.Report, bool) {
	switch {
	case phase >= lameduck.PhaseDraining:
		return w.busyReport(w.clock.Now(), health.StatusDraining, 0, map[string]any{})
	case phase == lameduck.PhaseServing && w.isSuperseded():
		return health.Report{Status: health.StatusSuperseded, Fields: map[string]any{
			"epoch": w.set.Epoch, "newest_epoch": w.newest.Load(),
		}}, true
	}
	return health.Report{}, false
}
