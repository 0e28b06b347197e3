package vet

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
)

// throttleWork is the CPU work, in core-seconds, that vet assumes may be
// queued ahead of a liveness probe in a busy process (a burst of requests,
// a GC cycle): under a CPU limit of L cores it takes throttleWork / L
// seconds of wall time, and the probe's answer waits that long. docs/vet.md,
// "liveness-throttle (warning)", gives the reasoning.
const throttleWork = 1.0

// checkLivenessThrottle is liveness-throttle (a warning): a container with
// a CPU limit runs at most limit × 100ms in each 100ms CFS period; when a
// busy process has used its quota, every thread waits for the next period,
// the probe handler's too, and a backlog of work drains at limit
// core-seconds per second. The kubelet restarts the container after
// failureThreshold probes in a row each waited timeoutSeconds in vain, so
// it waits timeoutSeconds × failureThreshold in all on failing answers;
// that must cover throttleWork / limit, or a load spike restarts a healthy
// pod, which sends its load to the others (the cascade). No finding
// without a CPU limit (requests alone never throttle) or a liveness probe,
// nor when the limit is 1 core or more (1 core-second then takes at most
// 1s, the least timeoutSeconds). At the probe's timeoutSeconds (the probe
// when absent).
// (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#how-pods-with-resource-limits-are-run).
func checkLivenessThrottle(j *judged) []Finding {
	lp := j.c.LivenessProbe
	cpu, ok := j.c.Resources.Limits[corev1.ResourceCPU]
	if lp == nil || !ok || cpu.MilliValue() <= 0 {
		return nil
	}
	cores := float64(cpu.MilliValue()) / 1000
	timeout, failures := nz(lp.TimeoutSeconds, defaultTimeout), nz(lp.FailureThreshold, defaultFailures)
	have := float64(timeout) * float64(failures)
	want := throttleWork / cores
	if have >= want {
		return nil
	}
	wantTimeout := int64(math.Ceil(want / float64(failures)))
	line, path := j.field("livenessProbe", "timeoutSeconds")
	return []Finding{j.finding("liveness-throttle", line, path,
		fmt.Sprintf("livenessProbe timeoutSeconds %d × failureThreshold %d = %gs, but under the CPU limit %s (%g cores) a busy moment's 1 core-second of work takes %gs: a load spike throttles the probe's answer past its timeout and the kubelet restarts a healthy container, sending its load to the others",
			timeout, failures, have, cpu.String(), cores, want),
		fmt.Sprintf("set livenessProbe.timeoutSeconds: %d (× failureThreshold %d ≥ %gs), or raise the CPU limit (or remove it: requests alone never throttle); keep /healthz free of checks, so that only a wedged process fails it",
			wantTimeout, failures, want),
		map[string]any{"timeout_seconds": timeout, "failure_threshold": failures, "tolerance_seconds": have,
			"cpu_limit_cores": cores, "work_core_seconds": throttleWork, "want_seconds": want, "want_timeout_seconds": wantTimeout})}
}
