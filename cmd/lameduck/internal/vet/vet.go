// Package vet checks Kubernetes manifests of services built on lameduck:
// the engine of `lameduck vet` (docs/vet.md). Each rule reads one
// container of one workload and reports findings with the numbers and the
// fix. The grace arithmetic and the LAMEDUCK_* parsing are the binary's
// own: the container's environment is resolved by lameduck.Resolve, the
// very function lameduck.New calls, and the budget is lameduck's Budget,
// which the binary logs at startup.
package vet

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lameduck/lameduck"
	corev1 "k8s.io/api/core/v1"
)

// Rule is one check, documented in docs/vet.md under its ID.
type Rule struct {
	ID    string // such as "grace-period"
	Title string // one line
	Level string // SARIF level: "error" or "warning"
	// Source is the public rule it enforces.
	Source string
}

// Rules lists every rule, in the order findings are reported.
var Rules = []Rule{
	{"lameduck-setting", "a LAMEDUCK_* variable the binary refuses at startup (exit 1 before it listens)", "error",
		"docs/probes-and-shutdown.md#configuration"},
	{"grace-period", "preStop + lame-duck window + teardown must fit terminationGracePeriodSeconds", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"},
	{"runner-grace", "a runner's drain bound + teardown must fit terminationGracePeriodSeconds", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"},
	{"grace-env", "LAMEDUCK_TERMINATION_GRACE must equal terminationGracePeriodSeconds", "warning",
		"docs/probes-and-shutdown.md#sizing-terminationgraceperiodseconds"},
	{"liveness-path", "liveness must not run dependency checks (/readyz) nor drain (/prestop); a runner's is not a TCP check", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/"},
	{"readiness-path", "readiness must be an HTTP GET of /readyz", "error",
		"https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-probes"},
	{"readiness-timeout", "readiness timeoutSeconds must exceed the check deadline with room", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#configure-probes"},
	{"readiness-max-age", "a check's result reused for LAMEDUCK_CHECK_MAX_AGE must stay well under readiness periodSeconds × failureThreshold", "warning",
		"docs/probes-and-shutdown.md#a-ping-budget-per-dependency"},
	{"startup-probe", "long boot work needs a startup probe, and liveness must not start before it allows", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#define-startup-probes"},
	{"prestop-sleep", "a preStop exec of sleep needs a shell and a sleep binary: use the /prestop HTTP hook", "warning",
		"https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/#hook-handler-implementations"},
	{"prestop-hook", "an HTTP preStop hook on /prestop needs LAMEDUCK_PRESTOP (or a token) and the token header", "error",
		"docs/probes-and-shutdown.md#the-prestop-hook-over-http"},
}

func rule(id string) Rule {
	for _, r := range Rules {
		if r.ID == id {
			return r
		}
	}
	panic("vet: unknown rule " + id)
}

// Finding is one problem in one container.
type Finding struct {
	Rule      string `json:"rule"`
	Level     string `json:"level"`
	Object    string `json:"object"` // Kind/name or Kind/namespace/name
	Container string `json:"container"`
	File      string `json:"file"`
	Line      int    `json:"line"`
	Message   string `json:"message"` // what is wrong, with the numbers
	Fix       string `json:"fix"`
}

// Options selects the containers to check.
type Options struct {
	// Containers are names of containers to check even when they set no
	// LAMEDUCK_* variable (their settings are then all defaults).
	Containers []string
	// Runners are names of containers to check as runners (package
	// worker), besides those recognised by their settings.
	Runners []string
}

// Kubernetes' probe defaults
// (https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#configure-probes).
const (
	defaultPeriod    = 10
	defaultTimeout   = 1
	defaultFailures  = 3
	checkTimeoutRoom = 2 * time.Second // readiness timeout ≥ check deadline + this
)

// Check runs every rule on every lameduck container of objs and returns the
// findings in input order, and how many containers were checked.
func Check(objs []Object, opt Options) (findings []Finding, checked int) {
	for i := range objs {
		o := &objs[i]
		for _, c := range o.Spec.Containers {
			if !usesLameduck(c) && !slices.Contains(opt.Containers, c.Name) && !slices.Contains(opt.Runners, c.Name) {
				continue
			}
			checked++
			findings = append(findings, checkContainer(o, c, opt)...)
		}
	}
	return findings, checked
}

func usesLameduck(c corev1.Container) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, lameduck.DefaultEnvPrefix) })
}

// isRunner reports whether c runs lameduck's worker package: named so, or
// set up with a runner's drain mode or epoch settings.
func isRunner(c corev1.Container, opt Options) bool {
	if slices.Contains(opt.Runners, c.Name) || slices.Contains(c.Args, "demo-worker") || slices.Contains(c.Command, "demo-worker") {
		return true
	}
	for _, e := range c.Env {
		switch strings.TrimPrefix(e.Name, lameduck.DefaultEnvPrefix) {
		case "EPOCH", "EPOCH_MISMATCH_DELAY", "FETCH_WAIT":
			return true
		case "DRAIN_MODE":
			if v := strings.ToLower(strings.TrimSpace(e.Value)); v == lameduck.DrainComplete || v == lameduck.DrainInterrupt {
				return true
			}
		}
	}
	return false
}

// environment returns the container's environment as the process sees it
// inside a pod: KUBERNETES_SERVICE_HOST (the kubelet sets it), then env in
// order. A value from a Secret stands in for the secret's text when it is
// LAMEDUCK_PRESTOP_TOKEN (any non-empty token); other valueFrom variables
// are unknown and count as unset. LAMEDUCK_PRESTOP_TOKEN_FILE names a file
// in the pod (a mounted Secret) that vet cannot read: it stands for a token
// from that file, unless LAMEDUCK_PRESTOP_TOKEN is set too, which the
// binary refuses.
func environment(c corev1.Container) []string {
	kv := []string{"KUBERNETES_SERVICE_HOST=10.0.0.1"}
	tokenSet := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == lameduck.DefaultEnvPrefix+"PRESTOP_TOKEN"
	})
	for _, e := range c.Env {
		switch {
		case e.Name == lameduck.DefaultEnvPrefix+"PRESTOP_TOKEN_FILE" && e.ValueFrom == nil && e.Value != "" && !tokenSet:
			kv = append(kv, lameduck.DefaultEnvPrefix+"PRESTOP_TOKEN=(from file "+e.Value+")")
		case e.ValueFrom == nil:
			kv = append(kv, e.Name+"="+e.Value)
		case e.Name == lameduck.DefaultEnvPrefix+"PRESTOP_TOKEN":
			kv = append(kv, e.Name+"=(from "+valueSource(e.ValueFrom)+")")
		default:
			kv = append(kv, e.Name) // known name, unknown value
		}
	}
	return kv
}

func valueSource(v *corev1.EnvVarSource) string {
	switch {
	case v.SecretKeyRef != nil:
		return "secret " + v.SecretKeyRef.Name
	case v.ConfigMapKeyRef != nil:
		return "configmap " + v.ConfigMapKeyRef.Name
	}
	return "a field"
}

// sleepArg finds the seconds of a `sleep N` in an exec hook.
var sleepArg = regexp.MustCompile(`(?:^|[\s/;&|])sleep\s+([0-9]+(?:\.[0-9]+)?)s?\b`)

// preStopTime returns the time the preStop hook spends before SIGTERM: an
// exec sleep's seconds, a sleep action's seconds, or 0 for an HTTP hook
// (GET /prestop is the window itself) and for no hook. execSleep reports an
// exec hook that runs sleep.
func preStopTime(c corev1.Container) (d time.Duration, execSleep bool, hook *corev1.LifecycleHandler) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0, false, nil
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Exec != nil:
		if m := sleepArg.FindStringSubmatch(strings.Join(h.Exec.Command, " ")); m != nil {
			f, _ := strconv.ParseFloat(m[1], 64)
			return time.Duration(f * float64(time.Second)), true, h
		}
	case h.Sleep != nil:
		return time.Duration(h.Sleep.Seconds) * time.Second, false, h
	}
	return 0, false, h
}

// fixSeconds is the budget's fix, with the grace period in the seconds a
// pod spec takes when the total is a minute or more.
func fixSeconds(b lameduck.Budget) string {
	if b.Total < time.Minute {
		return b.Fix()
	}
	return fmt.Sprintf("%s (terminationGracePeriodSeconds: %d)", b.Fix(), int64(math.Ceil(b.Total.Seconds())))
}

// graceOf returns the pod's terminationGracePeriodSeconds, 30 when unset.
func graceOf(spec *corev1.PodSpec) time.Duration {
	if spec.TerminationGracePeriodSeconds == nil {
		return 30 * time.Second
	}
	return time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
}

func nz(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

func checkContainer(o *Object, c corev1.Container, opt Options) []Finding {
	var out []Finding
	add := func(id, msg, fix string) {
		r := rule(id)
		out = append(out, Finding{Rule: id, Level: r.Level, Object: o.Ref(), Container: c.Name, File: o.File, Line: o.Line, Message: msg, Fix: fix})
	}
	runner := isRunner(c, opt)

	// The binary's own resolution of this environment.
	cfg := lameduck.Config{Runner: runner}
	cfg.LookupEnv, cfg.Environ = lameduck.EnvList(environment(c))
	res, errs := lameduck.Resolve(cfg)
	for _, err := range errs {
		var ce *lameduck.ConfigError
		if errors.As(err, &ce) {
			add("lameduck-setting", fmt.Sprintf("%s=%q: %s", ce.Setting, ce.Value, ce.Problem), ce.Fix)
		} else {
			add("lameduck-setting", err.Error(), "fix the setting as the message says")
		}
	}
	rc := res.Config

	// The grace arithmetic.
	grace := graceOf(&o.Spec)
	pre, execSleep, hook := preStopTime(c)
	b := res.Budget().WithPreStop(pre).Against(grace)
	if !b.Fits {
		id := "grace-period"
		if runner {
			id = "runner-grace"
		}
		graceText := fmt.Sprintf("terminationGracePeriodSeconds %d", int64(grace/time.Second))
		if o.Spec.TerminationGracePeriodSeconds == nil {
			graceText += " (unset: Kubernetes' default)"
		}
		add(id, fmt.Sprintf("%s > %s: the kubelet SIGKILLs the pod mid-teardown", b.Sum(), graceText),
			fixSeconds(b))
	}
	if rc.TerminationGrace > 0 && rc.TerminationGrace != grace {
		add("grace-env", fmt.Sprintf("%sTERMINATION_GRACE=%s but terminationGracePeriodSeconds is %d: the startup log checks the wrong number, and a default teardown is derived from it",
			rc.EnvPrefix, rc.TerminationGrace, int64(grace/time.Second)),
			fmt.Sprintf("template both from one value: %sTERMINATION_GRACE=%ds", rc.EnvPrefix, int64(grace/time.Second)))
	}

	// Probes.
	probeSummary := func(p *corev1.Probe) string {
		switch {
		case p.HTTPGet != nil:
			return "httpGet " + p.HTTPGet.Path
		case p.TCPSocket != nil:
			return "tcpSocket"
		case p.Exec != nil:
			return "exec"
		case p.GRPC != nil:
			return "grpc"
		}
		return "no handler"
	}
	live := rc.LivenessPaths[0] // the paths the binary answers (LAMEDUCK_*_PATH)
	if lp := c.LivenessProbe; lp != nil {
		switch {
		case lp.HTTPGet != nil && atPath(lp.HTTPGet.Path, rc.ReadinessPath, true):
			add("liveness-path", fmt.Sprintf("livenessProbe is httpGet %s, which runs the readiness checks: a dependency outage, or the drain's 503, makes the kubelet restart every pod", lp.HTTPGet.Path),
				"point livenessProbe at "+live+", which runs no check and stays 200 through the drain")
		case lp.HTTPGet != nil && atPath(lp.HTTPGet.Path, rc.PreStopPath, false):
			add("liveness-path", "livenessProbe is httpGet "+lp.HTTPGet.Path+", which starts the shutdown", "point livenessProbe at "+live)
		case runner && lp.TCPSocket != nil:
			add("liveness-path", "a runner's livenessProbe is a tcpSocket check, which passes while the consume loop is wedged",
				"use httpGet "+live+" on the probe port (LAMEDUCK_PROBE_ADDR, :9090), which reports the consume loop")
		}
	}
	if rp := c.ReadinessProbe; rp == nil || rp.HTTPGet == nil || !atPath(rp.HTTPGet.Path, rc.ReadinessPath, false) {
		what := "no readinessProbe"
		if rp != nil {
			what = "readinessProbe is " + probeSummary(rp)
		}
		add("readiness-path", what+": the pod is marked ready as soon as it listens, and the drain's 503 is never seen",
			"add readinessProbe: httpGet "+rc.ReadinessPath+" (starting, failed and draining are 503 there)")
	}
	if rp := c.ReadinessProbe; rp != nil && rp.HTTPGet != nil && !runner {
		timeout := time.Duration(nz(rp.TimeoutSeconds, defaultTimeout)) * time.Second
		want := rc.CheckTimeout + checkTimeoutRoom
		if timeout < want {
			add("readiness-timeout", fmt.Sprintf("readinessProbe timeoutSeconds %d < the check deadline %s (%sCHECK_TIMEOUT) + %s of room: the kubelet gives up before a degraded (200) answer and fails readiness",
				int64(timeout/time.Second), rc.CheckTimeout, rc.EnvPrefix, checkTimeoutRoom),
				fmt.Sprintf("set readinessProbe.timeoutSeconds: %d", int64(math.Ceil(want.Seconds()))))
		}
	}

	// A result reused for CHECK_MAX_AGE delays the detection of an outage by
	// up to that long: it must stay under the time the readiness probe was
	// sized to take a failing pod out in.
	if rp := c.ReadinessProbe; rp != nil && rp.HTTPGet != nil && !runner && rc.CheckMaxAge > 0 {
		detect := time.Duration(nz(rp.PeriodSeconds, defaultPeriod)*nz(rp.FailureThreshold, defaultFailures)) * time.Second
		if rc.CheckMaxAge >= detect {
			add("readiness-max-age", fmt.Sprintf("%sCHECK_MAX_AGE=%s ≥ readinessProbe periodSeconds × failureThreshold = %s: a failing dependency is reported up to %s late, so the pod leaves the endpoints up to %s after the outage began instead of %s",
				rc.EnvPrefix, rc.CheckMaxAge, detect, rc.CheckMaxAge, rc.CheckMaxAge+detect, detect),
				fmt.Sprintf("lower %sCHECK_MAX_AGE well under %s (a third of it: %s), or raise the probe's failureThreshold", rc.EnvPrefix, detect, (detect/3).Round(time.Second)))
		}
	}

	// Boot: STARTUP_TIMEOUT bounds it when set.
	if boot := rc.StartupTimeout; boot > 0 && res.Sources["STARTUP_TIMEOUT"] != "" && !strings.HasPrefix(res.Sources["STARTUP_TIMEOUT"], "default") {
		if sp := c.StartupProbe; sp == nil {
			if lp := c.LivenessProbe; lp != nil {
				allow := time.Duration(lp.InitialDelaySeconds+nz(lp.PeriodSeconds, defaultPeriod)*nz(lp.FailureThreshold, defaultFailures)) * time.Second
				if allow < boot {
					add("startup-probe", fmt.Sprintf("boot may take %s (%sSTARTUP_TIMEOUT) but with no startupProbe liveness fails after %s (initialDelaySeconds + periodSeconds × failureThreshold): a CrashLoop that reads like an application bug",
						boot, rc.EnvPrefix, allow),
						fmt.Sprintf("add startupProbe: httpGet %s, periodSeconds 5, failureThreshold %d", rc.StartupPath, int64(math.Ceil(boot.Seconds()/5))+1))
				}
			}
		} else {
			allow := time.Duration(sp.InitialDelaySeconds+nz(sp.PeriodSeconds, defaultPeriod)*nz(sp.FailureThreshold, defaultFailures)) * time.Second
			if allow < boot {
				add("startup-probe", fmt.Sprintf("startupProbe allows %s (initialDelaySeconds + periodSeconds × failureThreshold) but boot may take %s (%sSTARTUP_TIMEOUT): the kubelet kills the pod first",
					allow, boot, rc.EnvPrefix),
					fmt.Sprintf("raise startupProbe.failureThreshold to %d", int64(math.Ceil((boot-time.Duration(sp.InitialDelaySeconds)*time.Second).Seconds()/float64(nz(sp.PeriodSeconds, defaultPeriod))))+1))
			}
		}
	}
	// The preStop hook.
	if execSleep {
		add("prestop-sleep", fmt.Sprintf("preStop runs `%s` (%s before SIGTERM): a distroless or scratch image has no shell nor sleep, the hook fails (FailedPreStopHook) with no pause at all, and /readyz stays 200 while it sleeps",
			strings.Join(hook.Exec.Command, " "), pre),
			fmt.Sprintf("use preStop httpGet /prestop with a %sPRESTOP_TOKEN from a Secret (or %sPRESTOP=true with the probes on %sPROBE_ADDR): it flips readiness at once and its wait is the window, not added to it", rc.EnvPrefix, rc.EnvPrefix, rc.EnvPrefix))
	}
	if hook != nil && hook.HTTPGet != nil && atPath(hook.HTTPGet.Path, rc.PreStopPath, false) {
		switch {
		case !rc.PreStop:
			add("prestop-hook", "preStop is httpGet /prestop but the process does not serve it (LAMEDUCK_PRESTOP unset and no token): the hook gets 404 and the drain starts only at SIGTERM",
				fmt.Sprintf("set %sPRESTOP_TOKEN from a Secret and the same value in the hook's X-Lameduck-Token header (or %sPRESTOP=true with the probes on %sPROBE_ADDR)", rc.EnvPrefix, rc.EnvPrefix, rc.EnvPrefix))
		case rc.PreStopToken != "" && !slices.ContainsFunc(hook.HTTPGet.HTTPHeaders, func(h corev1.HTTPHeader) bool {
			return strings.EqualFold(h.Name, "X-Lameduck-Token") && h.Value != ""
		}):
			add("prestop-hook", "preStop is httpGet /prestop without an X-Lameduck-Token header, but the process requires a token: the hook gets 401 and the drain starts only at SIGTERM",
				"add httpHeaders: [{name: X-Lameduck-Token, value: <the token>}] to the hook")
		}
	}
	return out
}

// atPath reports whether a probe's path (which may carry a query) is base,
// or, with sub, one of base's sub-paths (/readyz/<check>).
func atPath(path, base string, sub bool) bool {
	p, _, _ := strings.Cut(path, "?")
	return p == base || sub && strings.HasPrefix(p, base+"/")
}
