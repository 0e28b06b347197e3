package worker

import (
	"net/http"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// answer is the worker's lameduck.ProbeAnswer.
func (w *Worker) answer(probe string, phase lameduck.Phase) (health.Report, bool) {
	switch probe {
	case lameduck.PathLiveness:
		return w.liveness(phase)
	case lameduck.PathReadiness:
		return w.readiness(phase)
	}
	return health.Report{}, false
}

// liveness answers 503 stalled when an idle loop has stopped cycling, and
// leaves every other answer (200 ok) to the Lifecycle. From the signal on
// a loop stops cycling on purpose, and a liveness failure would kill the
// pod mid-drain: alive.
func (w *Worker) liveness(phase lameduck.Phase) (health.Report, bool) {
	if phase >= lameduck.PhaseDraining {
		return health.Report{}, false
	}
	w.mu.Lock()
	loops := w.loops
	w.mu.Unlock()
	now := w.clock.Now()
	var worst *loop
	var worstIdle time.Duration
	stalled := 0
	for _, l := range loops {
		idle, ok := l.idle(now)
		if !ok || idle <= l.threshold {
			continue
		}
		stalled++
		if worst == nil || idle > worstIdle {
			worst, worstIdle = l, idle
		}
	}
	if worst == nil {
		return health.Report{}, false
	}
	return health.Report{Status: health.StatusStalled, Code: http.StatusServiceUnavailable, Fields: map[string]any{
		"loop":      worst.Name,
		"idle_for":  worstIdle.Round(time.Second).String(),
		"threshold": worst.threshold.String(),
		"stalled":   stalled,
	}}, true
}

// readiness answers draining (with busy) from the signal on, and
// superseded while serving under a newer epoch; starting and the checks'
// answer are the Lifecycle's.
func (w *Worker) readiness(phase lameduck.Phase) (health.Report, bool) {
	switch {
	case phase >= lameduck.PhaseDraining:
		busy := 0
		w.mu.Lock()
		loops := w.loops
		w.mu.Unlock()
		for _, l := range loops {
			if _, _, ok := l.busy(); ok {
				busy++
			}
		}
		return health.Report{Status: health.StatusDraining, Fields: map[string]any{
			"busy": busy > 0, "jobs_in_flight": busy,
		}}, true
	case phase == lameduck.PhaseServing && w.isSuperseded():
		return health.Report{Status: health.StatusSuperseded, Fields: map[string]any{
			"epoch": w.cfg.Epoch, "newest_epoch": w.newest.Load(),
		}}, true
	}
	return health.Report{}, false
}
