package lameduck

import "strconv"

// Phase is where a [Lifecycle] is in its life. Phases only move forward:
// starting → serving → draining → stopping → stopped (draining may also
// follow starting directly, when the signal arrives during boot).
//
// What the probes answer in each phase (docs/probes-and-shutdown.md, "Phases"):
//
//	phase     /startupz       /healthz  /readyz
//	starting  503 starting    200       503 starting
//	serving   200             200       200 ok
//	draining  200             200       503 draining
//	stopping  200             200       503 draining
//	stopped   (listeners closed)
//
// With Config.NotReadyAt "teardown", /readyz answers 200 draining through
// the draining phase and turns 503 at stopping.
//
// /startupz answers 200 only once startup work has finished; a Lifecycle
// that is told to shut down before that keeps answering 503 starting.
type Phase int32

const (
	// PhaseStarting: listeners are bound and probes answer, startup tasks
	// are still running.
	PhaseStarting Phase = iota
	// PhaseServing: startup finished; readiness passes.
	PhaseServing
	// PhaseDraining: the shutdown signal arrived; readiness is 503 (200
	// draining under Config.NotReadyAt "teardown") and the lame-duck
	// window is running while the application keeps serving.
	PhaseDraining
	// PhaseStopping: teardown; servers are shutting down under the teardown
	// budget.
	PhaseStopping
	// PhaseStopped: the sequence has finished and Run is returning.
	PhaseStopped
)

var phaseNames = [...]string{"starting", "serving", "draining", "stopping", "stopped"}

// String returns the phase's lower-case name, as written in probe bodies
// and logs ("serving"), or "Phase(N)" for an out-of-range value.
func (p Phase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}
