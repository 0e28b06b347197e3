// Package vet checks Kubernetes manifests of services built on lameduck:
// the engine of `lameduck vet` (docs/vet.md). Each rule is one function
// that reads one judged container (or one pod) and reports findings with
// the numbers, the fix and the line of the field they are about. The grace
// arithmetic and the LAMEDUCK_* parsing are the binary's own: the
// container's environment is resolved by lameduck.Resolve, the very
// function lameduck.New calls, and the budget is lameduck's Budget, which
// the binary logs at startup.
package vet

import (
	"cmp"
	"slices"
	"time"
)

// Rule is one check, documented in docs/vet.md under its ID.
type Rule struct {
	ID    string // such as "grace-period"
	Title string // one line
	Level string // SARIF level: "error" or "warning"
	// Source is the public rule it enforces.
	Source string
}

// Rules lists every rule, in the order findings on one line are reported.
var Rules = []Rule{
	{"lameduck-setting", "a LAMEDUCK_* variable the binary refuses at startup (exit 1 before it listens)", "error",
		"docs/probes-and-shutdown.md#configuration"},
	{"grace-period", "preStop + lame-duck window + teardown must fit terminationGracePeriodSeconds", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"},
	{"runner-grace", "a runner's drain bound + teardown must fit terminationGracePeriodSeconds", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"},
	{"pod-grace", "sidecars stop after the main containers: the pod's whole sequence must fit terminationGracePeriodSeconds", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/"},
	{"grace-env", "LAMEDUCK_TERMINATION_GRACE must equal terminationGracePeriodSeconds", "warning",
		"docs/probes-and-shutdown.md#sizing-terminationgraceperiodseconds"},
	{"autoscaler-grace", "the shutdown must fit cluster-autoscaler's 600s cap on an eviction's grace (--max-graceful-termination-sec), or the pod must opt out of scale-down", "warning",
		"https://github.com/kubernetes/autoscaler/blob/master/cluster-autoscaler/FAQ.md"},
	{"mesh-drain", "a service mesh's proxy must keep outbound traffic flowing until the application's shutdown ends (Istio terminationDrainDuration, Linkerd proxy-wait-before-exit-seconds, a proxy container's preStop)", "warning",
		"https://linkerd.io/2/tasks/graceful-shutdown/"},
	{"liveness-path", "liveness must not run dependency checks (/readyz, a gRPC service but liveness) nor drain (/prestop); a runner's is not a TCP check", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/"},
	{"liveness-throttle", "under a CPU limit, liveness timeoutSeconds × failureThreshold must cover 1 core-second of work ÷ the limit, or a load spike restarts healthy pods", "warning",
		"https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#how-pods-with-resource-limits-are-run"},
	{"readiness-path", "readiness must be an HTTP GET of /readyz, or a gRPC probe of a service but liveness", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-probes"},
	{"probes-identical", "liveness and readiness must ask different questions: the same path on the same port cannot be both", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-probes"},
	{"probes-swapped", "liveness on the readiness path and readiness on a liveness path: the two probes are swapped", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-probes"},
	{"probe-port", "an HTTP or gRPC probe must target the port that serves it (LAMEDUCK_PROBE_ADDR, or the application's port)", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#http-probes"},
	{"readiness-timeout", "readiness timeoutSeconds must exceed the check deadline with room", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#configure-probes"},
	{"readiness-window", "the lame-duck window must last until readiness can have seen the flip: (failureThreshold − 1) × periodSeconds + max(periodSeconds, timeoutSeconds)", "warning",
		"docs/probes-and-shutdown.md#probe-wiring"},
	{"readiness-max-age", "a check's result reused for LAMEDUCK_CHECK_MAX_AGE must stay well under readiness periodSeconds × failureThreshold", "warning",
		"docs/probes-and-shutdown.md#a-ping-budget-per-dependency"},
	{"startup-probe", "long boot work needs a startup probe, and liveness must not start before it allows", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#define-startup-probes"},
	{"prestop-sleep", "a preStop exec of sleep needs a shell and a sleep binary: use the /prestop HTTP hook", "warning",
		"https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/#hook-handler-implementations"},
	{"prestop-hook", "an HTTP preStop hook on /prestop needs LAMEDUCK_PRESTOP (or a token) and the token header", "error",
		"docs/probes-and-shutdown.md#the-prestop-hook-over-http"},
	{"pdb-unhealthy-eviction", "a PodDisruptionBudget selecting lameduck pods must set unhealthyPodEvictionPolicy: AlwaysAllow, or a drain blocks while they are not Ready", "error",
		"https://kubernetes.io/docs/tasks/run-application/configure-pdb/#unhealthy-pod-eviction-policy"},
	{"last-endpoint", "where the pod being stopped is its Service's last endpoint (Recreate; one replica without surge; externalTrafficPolicy: Local), readiness must keep it serving through the window", "warning",
		"https://github.com/kubernetes/enhancements/tree/master/keps/sig-network/1669-proxy-terminating-endpoints"},
}

func rule(id string) Rule {
	for _, r := range Rules {
		if r.ID == id {
			return r
		}
	}
	panic("vet: unknown rule " + id)
}

func ruleIndex(id string) int {
	return slices.IndexFunc(Rules, func(r Rule) bool { return r.ID == id })
}

// Finding is one problem in one container (or, for pod-grace, one pod).
type Finding struct {
	Rule      string `json:"rule"`
	Level     string `json:"level"`
	Object    string `json:"object"` // Kind/name or Kind/namespace/name
	Container string `json:"container"`
	File      string `json:"file"`
	// Line is the line of the field the finding is about (the probe, the
	// env entry, terminationGracePeriodSeconds), from 1; the line of its
	// closest parent when the field is absent (where to add it).
	Line int `json:"line"`
	// Field is that field's path in the object, such as
	// "spec.template.spec.containers[0].livenessProbe" ("" when the object
	// was not read from a file).
	Field   string `json:"field"`
	Message string `json:"message"` // what is wrong, with the numbers
	Fix     string `json:"fix"`
	// Values are the numbers the rule computed, as JSON numbers: keys
	// ending in _seconds are seconds (the terms of a sum, the sum, the
	// grace period, a probe's periodSeconds and timeoutSeconds), others are
	// counts (failure_threshold), ports, or the names of the settings and
	// probes involved. docs/vet.md lists each rule's keys.
	Values map[string]any `json:"values,omitempty"`
}

// Skip is a container vet did not judge, and why.
type Skip struct {
	Object    string `json:"object"`
	Container string `json:"container"`
	File      string `json:"file"`
	Line      int    `json:"line"`
	Reason    string `json:"reason"`
}

// Judged is a container vet judged, and why.
type Judged struct {
	Object    string `json:"object"`
	Container string `json:"container"`
	File      string `json:"file"`
	Line      int    `json:"line"`
	Runner    bool   `json:"runner"`
	// Signs say what in the manifest shows it runs lameduck, such as
	// "sets LAMEDUCK_ENV" or "livenessProbe is httpGet /healthz, a path
	// lameduck serves".
	Signs []string `json:"signs"`
}

// Report is the outcome of Run.
type Report struct {
	// Findings are sorted by file (in input order), line, rule (in Rules
	// order), container and message: one order on every run.
	Findings []Finding
	// Containers is how many containers were judged; Judged lists them,
	// in input order.
	Containers int
	Judged     []Judged
	// Skipped are the containers of the workloads read that were not
	// judged, in input order.
	Skipped []Skip
}

// Options selects the containers to check.
type Options struct {
	// Containers are names of containers to check even when nothing in the
	// manifest says they run lameduck (their settings are then all
	// defaults).
	Containers []string
	// Runners are names of containers to check as runners (package
	// worker), besides those recognised by their settings.
	Runners []string
	// Skip are names of containers never to judge, whatever they show
	// (a third-party workload with a /healthz probe of its own).
	Skip []string
}

// Kubernetes' probe defaults
// (https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#configure-probes).
const (
	defaultPeriod    = 10
	defaultTimeout   = 1
	defaultFailures  = 3
	checkTimeoutRoom = 2 * time.Second // readiness timeout ≥ check deadline + this
)

// Check runs every rule on objs and returns the findings, in Report's
// order, and how many containers were judged.
func Check(objs []Object, opt Options) (findings []Finding, checked int) {
	r := Run(objs, opt)
	return r.Findings, r.Containers
}

// Run judges every container of objs that runs lameduck (see judge), runs
// every rule on each and on each pod, and reports the findings, how many
// containers were judged and which were skipped. Its steps, per object:
// judge each container (or skip it, saying why), run the container rules
// on each judged one, then the pod rule on them together; then each
// PodDisruptionBudget against the workloads it selects; at the end, sort
// the findings.
func Run(objs []Object, opt Options) Report {
	var r Report
	fileOrder := map[string]int{}
	judgedBy := map[int][]*judged{} // by index in objs
	for i := range objs {
		o := &objs[i]
		if _, ok := fileOrder[o.File]; !ok {
			fileOrder[o.File] = len(fileOrder)
		}
		pod := r.judgeAll(o, opt)
		judgedBy[i] = pod
		for _, j := range pod {
			r.Findings = append(r.Findings, runContainerRules(j)...)
		}
		r.Findings = append(r.Findings, checkPodGrace(o, pod)...)
	}
	for i := range objs {
		r.Findings = append(r.Findings, checkPDBEviction(&objs[i], objs, judgedBy)...)
		r.Findings = append(r.Findings, checkLastEndpoint(&objs[i], objs, judgedBy, i)...)
	}
	sortFindings(r.Findings, fileOrder)
	return r
}

// judgeAll judges o's containers, recording each as judged or skipped,
// and returns the judged ones, in the pod's order.
func (r *Report) judgeAll(o *Object, opt Options) []*judged {
	var pod []*judged
	for _, k := range podContainers(o) {
		j, why := judge(o, k, opt)
		if j == nil {
			r.Skipped = append(r.Skipped, Skip{Object: o.Ref(), Container: k.c.Name, File: o.File, Line: o.lineOf(k.at), Reason: why})
			continue
		}
		r.Containers++
		r.Judged = append(r.Judged, Judged{Object: o.Ref(), Container: k.c.Name, File: o.File, Line: o.lineOf(k.at), Runner: j.runner, Signs: j.signs})
		pod = append(pod, j)
	}
	return pod
}

// runContainerRules runs every container rule on j, in containerRules'
// order.
func runContainerRules(j *judged) []Finding {
	var fs []Finding
	for _, r := range containerRules {
		fs = append(fs, r.check(j)...)
	}
	return fs
}

// sortFindings sorts fs in Report's order: by file (fileOrder, the input
// order), line, rule (in Rules order), container and message.
func sortFindings(fs []Finding, fileOrder map[string]int) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(fileOrder[a.File], fileOrder[b.File]), cmp.Compare(a.Line, b.Line),
			cmp.Compare(ruleIndex(a.Rule), ruleIndex(b.Rule)), cmp.Compare(a.Container, b.Container), cmp.Compare(a.Message, b.Message))
	})
}

// objectRules are the rules run once per object rather than per judged
// container: pod-grace per pod (checkPodGrace), pdb-unhealthy-eviction per
// PodDisruptionBudget (checkPDBEviction), last-endpoint per Deployment or
// Service (checkLastEndpoint).
var objectRules = []string{"pod-grace", "pdb-unhealthy-eviction", "last-endpoint"}

// containerRules are the rules run on each judged container, one function
// per rule id, in Rules order; pod-grace (checkPodGrace) runs once per pod.
// A function reports findings of its own id only.
var containerRules = []struct {
	id    string
	check func(*judged) []Finding
}{
	{"lameduck-setting", checkSettings},
	{"grace-period", checkGracePeriod},
	{"runner-grace", checkRunnerGrace},
	{"grace-env", checkGraceEnv},
	{"autoscaler-grace", checkAutoscalerGrace},
	{"mesh-drain", checkMeshDrain},
	{"liveness-path", checkLivenessPath},
	{"liveness-throttle", checkLivenessThrottle},
	{"readiness-path", checkReadinessPath},
	{"probes-identical", checkProbesIdentical},
	{"probes-swapped", checkProbesSwapped},
	{"probe-port", checkProbePorts},
	{"readiness-timeout", checkReadinessTimeout},
	{"readiness-window", checkReadinessWindow},
	{"readiness-max-age", checkReadinessMaxAge},
	{"startup-probe", checkStartupProbe},
	{"prestop-sleep", checkPreStopSleep},
	{"prestop-hook", checkPreStopHook},
}
