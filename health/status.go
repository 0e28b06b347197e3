package health

// Status is the word a probe body carries in its "status" field.
//
// The words are those of docs/probes-and-shutdown.md ("Phases" and
// "Readiness checks"): a readiness probe answers [StatusOK], [StatusDegraded] (still 200),
// [StatusFailed] (503), [StatusStarting] (503 during boot) or
// [StatusDraining] (503 from the shutdown signal on).
type Status string

const (
	// StatusOK means the probe passes. HTTP 200.
	StatusOK Status = "ok"
	// StatusDegraded means a non-critical dependency failed; the pod still
	// serves. HTTP 200, so a partial degradation never becomes an outage
	// (docs/probes-and-shutdown.md, "Readiness checks").
	StatusDegraded Status = "degraded"
	// StatusFailed means a critical dependency or gate failed. HTTP 503.
	StatusFailed Status = "failed"
	// StatusStarting means boot work has not finished. HTTP 503.
	StatusStarting Status = "starting"
	// StatusDraining means the shutdown sequence has begun: readiness is 503
	// and stays 503 until the process exits. HTTP 503.
	StatusDraining Status = "draining"
	// StatusStalled means a runner's idle consume loop has stopped cycling:
	// liveness fails, and a restart fixes it (docs/runners.md). HTTP 503.
	StatusStalled Status = "stalled"
	// StatusSuperseded means a newer rollout epoch exists: the runner takes
	// no new job and readiness is 503 (docs/runners.md). HTTP 503.
	StatusSuperseded Status = "superseded"
	// StatusMaintenance means an operator took the pod out of rotation
	// with the maintenance switch: readiness is 503 until the switch is
	// turned off; nothing drains (docs/probes-and-shutdown.md, "The
	// maintenance switch"). HTTP 503.
	StatusMaintenance Status = "maintenance"
)

// Code returns the HTTP status code a probe answers with this status:
// 200 for [StatusOK] and [StatusDegraded], 503 for everything else,
// including an unknown word.
func (s Status) Code() int {
	switch s {
	case StatusOK, StatusDegraded:
		return 200
	default:
		return 503
	}
}
