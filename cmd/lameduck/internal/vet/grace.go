package vet

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/grace"
	corev1 "k8s.io/api/core/v1"
)

// checkSettings is lameduck-setting: every error the binary's resolver
// returns for the container's environment, at the line of the variable.
func checkSettings(j *judged) []Finding {
	var out []Finding
	for _, err := range j.errs {
		var ce *lameduck.ConfigError
		if !errors.As(err, &ce) {
			line, path := j.field("env")
			out = append(out, j.finding("lameduck-setting", line, path, err.Error(), "fix the setting as the message says", nil))
			continue
		}
		line, path := j.envField(ce.Setting)
		out = append(out, j.finding("lameduck-setting", line, path, fmt.Sprintf("%s=%q: %s", ce.Setting, ce.Value, ce.Problem), ce.Fix,
			map[string]any{"setting": ce.Setting, "value": ce.Value}))
	}
	return out
}

// refused reports whether the binary refuses any of the container's
// settings. The resolver then holds the default in place of each refused
// value, so a sum made of them would be judged on numbers the user never
// wrote: the rules that add durations wait until the settings are fixed
// (lameduck-setting names each one).
func (j *judged) refused() bool { return len(j.errs) > 0 }

// graceOf returns the pod's terminationGracePeriodSeconds (30 when unset)
// as a duration, the largest there is when the seconds do not fit in one,
// and as the seconds the manifest says.
func graceOf(spec *corev1.PodSpec) (time.Duration, int64) {
	if spec.TerminationGracePeriodSeconds == nil {
		return grace.DefaultTerminationGrace, int64(grace.DefaultTerminationGrace / time.Second)
	}
	secs := *spec.TerminationGracePeriodSeconds
	d, _ := secondsToDuration(float64(secs))
	return d, secs
}

// graceText is "terminationGracePeriodSeconds N", saying when N is
// Kubernetes' default.
func graceText(spec *corev1.PodSpec) string {
	_, secs := graceOf(spec)
	s := fmt.Sprintf("terminationGracePeriodSeconds %d", secs)
	if spec.TerminationGracePeriodSeconds == nil {
		s += " (unset: Kubernetes' default)"
	}
	return s
}

// budget is the container's grace arithmetic: the binary's own (what it
// logs at startup, internal/grace over the resolved settings), with the
// preStop hook from the manifest added and checked against the pod's grace
// period.
func (j *judged) budget() grace.Budget {
	g, _ := graceOf(&j.o.Spec)
	return grace.Of(j.settings()).WithPreStop(j.ps.d).Against(g)
}

// settings are the resolved settings the budget is made of, as the binary
// maps its own (TestBudgetIsTheBinarysStartupLine holds them equal).
func (j *judged) settings() grace.Settings {
	s := grace.Settings{
		EnvPrefix: j.rc.EnvPrefix, Kubernetes: j.rc.Env == lameduck.EnvKubernetes,
		PreStopDelay: j.rc.PreStopDelay, ShutdownDelay: j.rc.ShutdownDelay, DrainTimeout: j.rc.DrainTimeout,
		ShutdownTeardown: j.rc.ShutdownTeardown, TerminationGrace: j.rc.TerminationGrace,
		IdleDrain: j.rc.DrainMode == lameduck.DrainIdle,
		Sources:   j.res.Sources,
	}
	if j.runner {
		s.RunnerWindow = grace.RunnerWindow
	}
	return s
}

// budgetValues are a budget's numbers for Finding.Values.
func budgetValues(b grace.Budget, spec *corev1.PodSpec, res lameduck.Resolved) map[string]any {
	_, secs := graceOf(spec)
	return map[string]any{
		"prestop_seconds": seconds(b.PreStop), "window_seconds": seconds(b.Window), "window_setting": b.EnvPrefix + b.WindowSetting,
		"teardown_seconds": seconds(b.Teardown), "teardown_rule": res.Sources["SHUTDOWN_TEARDOWN"],
		"total_seconds": seconds(b.Total), "grace_seconds": secs, "grace_default": spec.TerminationGracePeriodSeconds == nil,
		"over_seconds": seconds(b.Total - b.Grace),
	}
}

// checkGracePeriod is grace-period, for a server: preStop + longest
// window + teardown ≤ terminationGracePeriodSeconds, at the line of
// terminationGracePeriodSeconds.
func checkGracePeriod(j *judged) []Finding {
	if j.runner {
		return nil // runner-grace
	}
	return j.graceFindings("grace-period")
}

// checkRunnerGrace is runner-grace, grace-period's sum for a runner:
// preStop + drain bound + teardown ≤ terminationGracePeriodSeconds.
func checkRunnerGrace(j *judged) []Finding {
	if !j.runner {
		return nil // grace-period
	}
	return j.graceFindings("runner-grace")
}

// graceFindings reports, as rule id, a preStop that never returns, or a
// budget that does not fit the grace period; nothing while a setting is
// refused (the sum would hold the default in place of the refused value).
func (j *judged) graceFindings(id string) []Finding {
	if j.refused() {
		return nil
	}
	line, path := j.podField("terminationGracePeriodSeconds")
	_, secs := graceOf(&j.o.Spec)
	if j.ps.forever {
		// The kubelet waits for the hook until the grace period is spent,
		// then sends SIGTERM with a one-off 2s extension before SIGKILL.
		return []Finding{j.finding(id, line, path,
			fmt.Sprintf("preStop %s never returns: the kubelet sends SIGTERM only when %s is spent, and SIGKILL 2s later, so the grace period can never hold the window and the teardown",
				hookText(j.ps.hook), graceText(&j.o.Spec)),
			"bound the preStop sleep (its time counts against terminationGracePeriodSeconds), or use preStop httpGet /prestop, whose wait is the window itself",
			map[string]any{"prestop_forever": true, "grace_seconds": secs, "grace_default": j.o.Spec.TerminationGracePeriodSeconds == nil})}
	}
	b := j.budget()
	if b.Fits {
		return nil
	}
	msg := fmt.Sprintf("%s > %s: the kubelet SIGKILLs the pod mid-teardown", b.Sum(), graceText(&j.o.Spec))
	if j.rc.TerminationGrace == 0 && strings.HasPrefix(j.res.Sources["SHUTDOWN_TEARDOWN"], "default: Kubernetes' default") {
		// The binary derived its teardown from a grace period it assumed.
		msg += fmt.Sprintf(" (the teardown %s is derived from Kubernetes' default 30s, since %sTERMINATION_GRACE is unset)", b.Teardown, j.rc.EnvPrefix)
	}
	return []Finding{j.finding(id, line, path, msg, fixSeconds(b), budgetValues(b, &j.o.Spec, j.res))}
}

// fixSeconds is the budget's fix, with the grace period in the seconds a
// pod spec takes when the total is a minute or more.
func fixSeconds(b grace.Budget) string {
	if b.Total < time.Minute {
		return b.Fix()
	}
	return fmt.Sprintf("%s (terminationGracePeriodSeconds: %d)", b.Fix(), ceilSeconds(b.Total))
}

func ceilSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// checkGraceEnv is grace-env: LAMEDUCK_TERMINATION_GRACE must say the
// pod's grace period, at the line of the variable.
func checkGraceEnv(j *judged) []Finding {
	if j.refused() {
		return nil
	}
	grace, secs := graceOf(&j.o.Spec)
	if j.rc.TerminationGrace == 0 || j.rc.TerminationGrace == grace {
		return nil
	}
	line, path := j.envField(j.rc.EnvPrefix + "TERMINATION_GRACE")
	return []Finding{j.finding("grace-env", line, path,
		fmt.Sprintf("%sTERMINATION_GRACE=%s but terminationGracePeriodSeconds is %d: the startup log checks the wrong number, and a default teardown is derived from it",
			j.rc.EnvPrefix, j.rc.TerminationGrace, secs),
		fmt.Sprintf("template both from one value: %sTERMINATION_GRACE=%ds", j.rc.EnvPrefix, secs),
		map[string]any{"env_grace_seconds": seconds(j.rc.TerminationGrace), "grace_seconds": secs})}
}

// checkPodGrace is pod-grace: the grace period is the pod's, shared by
// its containers. The regular containers stop in parallel, each after its
// own preStop hook; native sidecars get SIGTERM only once the last of them
// has exited, one after the other in reverse order
// (https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/).
// The pod's sequence is the longest regular container's time plus every
// sidecar's, and it must fit terminationGracePeriodSeconds too. A judged
// container's time is its budget; another container's is its preStop
// sleep, the least it takes. Reported once per pod, when it has a sidecar
// and the sequence is longer than any judged container alone (which
// grace-period reports), at the line of terminationGracePeriodSeconds.
func checkPodGrace(o *Object, judgedHere []*judged) []Finding {
	byName := map[string]*judged{}
	for _, j := range judgedHere {
		if j.refused() {
			return nil // one container's sum would hold a default in place of its refused value
		}
		byName[j.c.Name] = j
	}
	type term struct {
		name    string
		d       time.Duration
		sidecar bool
		judged  bool
	}
	var main *term
	var sidecars []term
	anyJudged := len(judgedHere) > 0
	for _, k := range podContainers(o) {
		t := term{name: k.c.Name, sidecar: k.sidecar}
		if j := byName[k.c.Name]; j != nil {
			if j.ps.forever {
				return nil // grace-period says it
			}
			t.d, t.judged = j.budget().Total, true
		} else {
			t.d = preStopTime(k.c).d
		}
		switch {
		case k.sidecar:
			sidecars = append(sidecars, t)
		case main == nil || t.d > main.d:
			main = &t
		}
	}
	if !anyJudged || main == nil || len(sidecars) == 0 {
		return nil
	}
	total := main.d
	var terms []string
	values := []map[string]any{{"container": main.name, "seconds": seconds(main.d), "sidecar": false, "judged": main.judged}}
	terms = append(terms, fmt.Sprintf("%q %s (the longest regular container)", main.name, main.d))
	var derived []string
	for i := len(sidecars) - 1; i >= 0; i-- {
		s := sidecars[i]
		total = addSat(total, s.d)
		terms = append(terms, fmt.Sprintf("sidecar %q %s", s.name, s.d))
		values = append(values, map[string]any{"container": s.name, "seconds": seconds(s.d), "sidecar": true, "judged": s.judged})
		if j := byName[s.name]; j != nil && strings.HasPrefix(j.res.Sources["SHUTDOWN_TEARDOWN"], "default:") {
			derived = append(derived, s.name)
		}
	}
	grace, secs := graceOf(&o.Spec)
	var single time.Duration // the longest judged container alone: grace-period reports it
	for _, j := range judgedHere {
		single = max(single, j.budget().Total)
	}
	if total <= grace || total <= single {
		return nil
	}
	fix := fmt.Sprintf("raise terminationGracePeriodSeconds to at least %d, or shorten the containers' windows and teardowns", ceilSeconds(total))
	if len(derived) > 0 {
		fix += fmt.Sprintf("; give sidecar %s an explicit %sSHUTDOWN_TEARDOWN: a teardown derived from the pod's grace period assumes it stops first",
			strings.Join(quoteAll(derived), ", "), envPrefix)
	}
	name := judgedHere[0].c.Name // the judged sidecar, or else the first judged container
	for _, j := range judgedHere {
		if j.sidecar {
			name = j.c.Name
			break
		}
	}
	line, path := o.lineOf(o.spec.at("terminationGracePeriodSeconds")), o.spec.at("terminationGracePeriodSeconds").path
	return []Finding{{Rule: "pod-grace", Level: rule("pod-grace").Level, Object: o.Ref(), Container: name, File: o.File, Line: line, Field: path,
		Message: fmt.Sprintf("sidecars stop only after the regular containers have exited, in reverse order: %s = %s > %s: the kubelet SIGKILLs the last sidecar mid-teardown",
			strings.Join(terms, " + "), total, graceText(&o.Spec)),
		Fix:    fix,
		Values: map[string]any{"terms": values, "total_seconds": seconds(total), "grace_seconds": secs, "grace_default": o.Spec.TerminationGracePeriodSeconds == nil, "over_seconds": seconds(total - grace)},
	}}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// addSat is a + b for non-negative durations, saturated at the largest one.
func addSat(a, b time.Duration) time.Duration {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
