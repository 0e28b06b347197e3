package vet

import (
	"fmt"
	"time"
)

// Caps on the grace period that the pod spec does not show.
const (
	// autoscalerCap is cluster-autoscaler's --max-graceful-termination-sec
	// default: the most grace it gives a pod it evicts to scale a node down
	// (https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md).
	autoscalerCap = 600 * time.Second
	// spotNotice is the interruption notice of an AWS spot instance, the
	// longest of the clouds' (Google Cloud and Azure give 30s).
	spotNotice = 120 * time.Second
	// safeToEvict is the pod annotation by which cluster-autoscaler leaves
	// a node with the pod alone ("false"); doNotDisrupt is Karpenter's
	// ("true").
	safeToEvict  = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	doNotDisrupt = "karpenter.sh/do-not-disrupt"
)

// checkAutoscalerGrace is autoscaler-grace (a warning): a container whose
// shutdown (preStop + window, or a runner's drain bound, + teardown) is
// longer than cluster-autoscaler's default --max-graceful-termination-sec,
// 600s, in a pod whose grace period is longer than 600s too (a shorter
// one cuts the shutdown first, which grace-period and runner-grace
// report). A scale-down evicts the pod with min(its grace, 600s), so the
// kubelet SIGKILLs it 600s after the eviction whatever
// terminationGracePeriodSeconds says
// (https://github.com/kubernetes/kubernetes/issues/94435). Silent when the
// pod template asks the autoscaler to leave its node alone
// (cluster-autoscaler.kubernetes.io/safe-to-evict: "false", or Karpenter's
// karpenter.sh/do-not-disrupt: "true"), while a setting is refused, and
// for a preStop that never returns (grace-period says it). At the line of
// terminationGracePeriodSeconds.
func checkAutoscalerGrace(j *judged) []Finding {
	if j.refused() || j.ps.forever || j.o.Annotations[safeToEvict] == "false" || j.o.Annotations[doNotDisrupt] == "true" {
		return nil
	}
	b := j.budget()
	if min(b.Total, b.Grace) <= autoscalerCap {
		return nil // a grace period under the cap cuts the shutdown first: grace-period says so
	}
	line, path := j.podField("terminationGracePeriodSeconds")
	what := fmt.Sprintf("the kubelet SIGKILLs the pod %s before its shutdown can end", b.Total-autoscalerCap)
	fix := fmt.Sprintf("lower the sum to %ds or less (%s%s, %sSHUTDOWN_TEARDOWN)", int64(autoscalerCap/time.Second), b.EnvPrefix, b.WindowSetting, b.EnvPrefix)
	if j.runner {
		what = fmt.Sprintf("a job still running then is SIGKILLed, up to %s before the drain bound", b.Total-autoscalerCap)
		fix = fmt.Sprintf("make jobs resumable: %sDRAIN_MODE=interrupt with checkpoints, and a %sDRAIN_TIMEOUT that fits %ds with the teardown; or keep jobs shorter than that (docs/runners.md, \"Caps on the grace\")",
			b.EnvPrefix, b.EnvPrefix, int64(autoscalerCap/time.Second))
	}
	fix += fmt.Sprintf(`; or, if the node must not be scaled down while it runs, annotate the pod template %s: "false" (Karpenter: %s: "true")`, safeToEvict, doNotDisrupt)
	v := budgetValues(b, &j.o.Spec, j.res)
	delete(v, "grace_default")
	v["cap_seconds"] = seconds(autoscalerCap)
	v["cap_setting"] = "--max-graceful-termination-sec"
	v["over_seconds"] = seconds(b.Total - autoscalerCap)
	v["spot_notice_seconds"] = seconds(spotNotice)
	return []Finding{j.finding("autoscaler-grace", line, path,
		fmt.Sprintf("%s > 600s, cluster-autoscaler's default --max-graceful-termination-sec: a scale-down evicts the pod with at most 600s of grace, whatever %s says: %s (a spot interruption gives about 120s)",
			b.Sum(), graceText(&j.o.Spec), what),
		fix, v)}
}
