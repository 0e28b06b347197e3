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
	"path"
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
	{"liveness-path", "liveness must not run dependency checks (/readyz, a gRPC service but liveness) nor drain (/prestop); a runner's is not a TCP check", "error",
		"https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/"},
	{"readiness-path", "readiness must be an HTTP GET of /readyz, or a gRPC probe of a service but liveness", "error",
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

// shellToken splits an exec hook's command (a shell script or an argv)
// into words and the shell's command separators.
var shellToken = regexp.MustCompile("[^\\s;&|()'\"`]+|[;&|()\n]")

// sleepOperand is one operand of GNU coreutils sleep: a non-negative number
// (a fraction and an exponent allowed) or "inf"/"infinity", with an optional
// unit s, m, h or d (`info coreutils sleep`; busybox's sleep takes the same).
var sleepOperand = regexp.MustCompile(`^(?i)((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|inf|infinity)([smhd]?)$`)

var sleepUnit = map[string]float64{"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

// preStop is what a container's preStop hook does before SIGTERM.
type preStop struct {
	hook *corev1.LifecycleHandler // nil when there is none
	// d is the time spent before SIGTERM: an exec sleep's operands summed
	// (every sleep of the script), a sleep action's seconds, or 0 for an
	// HTTP hook (GET /prestop is the window itself) and for no hook.
	d time.Duration
	// execSleep reports an exec hook that runs sleep.
	execSleep bool
	// forever reports a sleep that never returns within a time.Duration
	// (`sleep infinity`, or more than about 292 years).
	forever bool
	// unknown reports a sleep operand vet cannot read (`sleep $DELAY`):
	// d counts only the operands it could.
	unknown bool
}

// sleepTime returns the seconds of the sleep commands of an exec hook's
// command, summed as GNU sleep sums its operands.
func sleepTime(command []string) (p preStop) {
	toks := shellToken.FindAllString(strings.Join(command, " "), -1)
	var secs float64
	for i := 0; i < len(toks); i++ {
		if path.Base(toks[i]) != "sleep" {
			continue
		}
		p.execSleep = true
		for i++; i < len(toks) && !strings.ContainsAny(toks[i], ";&|()\n"); i++ {
			if strings.ContainsAny(toks[i], "<>") { // a redirection: 2>/dev/null
				continue
			}
			m := sleepOperand.FindStringSubmatch(toks[i])
			if m == nil {
				p.unknown = true
				continue
			}
			f, err := strconv.ParseFloat(m[1], 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				p.unknown = true
				continue
			}
			secs += f * sleepUnit[strings.ToLower(m[2])]
		}
	}
	p.d, p.forever = secondsToDuration(secs)
	return p
}

// secondsToDuration converts seconds to a time.Duration, reporting the
// seconds that do not fit in one (more than about 292 years, or infinite):
// the duration is then the largest there is.
func secondsToDuration(secs float64) (time.Duration, bool) {
	if ns := secs * float64(time.Second); ns < math.MaxInt64 {
		return time.Duration(ns), false
	}
	return math.MaxInt64, true
}

// preStopTime reads c's preStop hook.
func preStopTime(c corev1.Container) preStop {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return preStop{}
	}
	h := c.Lifecycle.PreStop
	var p preStop
	switch {
	case h.Exec != nil:
		p = sleepTime(h.Exec.Command)
	case h.Sleep != nil:
		p.d, p.forever = secondsToDuration(float64(max(h.Sleep.Seconds, 0)))
	}
	p.hook = h
	return p
}

// hookText names a preStop hook that sleeps: "runs `sleep infinity`" or
// "sleeps N seconds".
func hookText(h *corev1.LifecycleHandler) string {
	if h.Exec != nil {
		return "runs `" + strings.Join(h.Exec.Command, " ") + "`, which"
	}
	return fmt.Sprintf("sleeps %d seconds, which", h.Sleep.Seconds)
}

// fixSeconds is the budget's fix, with the grace period in the seconds a
// pod spec takes when the total is a minute or more.
func fixSeconds(b lameduck.Budget) string {
	if b.Total < time.Minute {
		return b.Fix()
	}
	return fmt.Sprintf("%s (terminationGracePeriodSeconds: %d)", b.Fix(), int64(math.Ceil(b.Total.Seconds())))
}

// graceOf returns the pod's terminationGracePeriodSeconds (30 when unset)
// as a duration, the largest there is when the seconds do not fit in one,
// and as the seconds the manifest says.
func graceOf(spec *corev1.PodSpec) (time.Duration, int64) {
	if spec.TerminationGracePeriodSeconds == nil {
		return 30 * time.Second, 30
	}
	secs := *spec.TerminationGracePeriodSeconds
	d, _ := secondsToDuration(float64(secs))
	return d, secs
}

// probeSpan returns initialDelaySeconds + periodSeconds × failureThreshold
// of a probe, with Kubernetes' defaults for unset fields, computed in 64
// bits and saturated at the largest time.Duration.
func probeSpan(initialDelay, period, failures int32) time.Duration {
	d, _ := secondsToDuration(float64(int64(initialDelay) + int64(nz(period, defaultPeriod))*int64(nz(failures, defaultFailures))))
	return d
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
	grace, graceSecs := graceOf(&o.Spec)
	graceText := fmt.Sprintf("terminationGracePeriodSeconds %d", graceSecs)
	if o.Spec.TerminationGracePeriodSeconds == nil {
		graceText += " (unset: Kubernetes' default)"
	}
	graceID := "grace-period"
	if runner {
		graceID = "runner-grace"
	}
	ps := preStopTime(c)
	if ps.forever {
		// The kubelet waits for the hook until the grace period is spent,
		// then sends SIGTERM with a one-off 2s extension before SIGKILL.
		add(graceID, fmt.Sprintf("preStop %s never returns: the kubelet sends SIGTERM only when %s is spent, and SIGKILL 2s later, so the grace period can never hold the window and the teardown",
			hookText(ps.hook), graceText),
			"bound the preStop sleep (its time counts against terminationGracePeriodSeconds), or use preStop httpGet /prestop, whose wait is the window itself")
	} else if b := res.Budget().WithPreStop(ps.d).Against(grace); !b.Fits {
		add(graceID, fmt.Sprintf("%s > %s: the kubelet SIGKILLs the pod mid-teardown", b.Sum(), graceText),
			fixSeconds(b))
	}
	if rc.TerminationGrace > 0 && rc.TerminationGrace != grace {
		add("grace-env", fmt.Sprintf("%sTERMINATION_GRACE=%s but terminationGracePeriodSeconds is %d: the startup log checks the wrong number, and a default teardown is derived from it",
			rc.EnvPrefix, rc.TerminationGrace, graceSecs),
			fmt.Sprintf("template both from one value: %sTERMINATION_GRACE=%ds", rc.EnvPrefix, graceSecs))
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
			return fmt.Sprintf("grpc service %q", grpcService(p.GRPC))
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
		case lp.GRPC != nil && grpcService(lp.GRPC) != grpcLiveness:
			add("liveness-path", fmt.Sprintf("livenessProbe is %s, which answers like %s: NOT_SERVING while a critical check fails and from the shutdown signal on, so the kubelet restarts every pod in an outage and kills a draining one",
				probeSummary(lp), rc.ReadinessPath),
				fmt.Sprintf("set livenessProbe.grpc.service: %s, which answers like %s and stays SERVING through the drain", grpcLiveness, live))
		case runner && lp.TCPSocket != nil:
			add("liveness-path", "a runner's livenessProbe is a tcpSocket check, which passes while the consume loop is wedged",
				"use httpGet "+live+" on the probe port (LAMEDUCK_PROBE_ADDR, :9090), which reports the consume loop")
		}
	}
	rp := c.ReadinessProbe
	// readinessLike: the probe asks lameduck's readiness (/readyz, or a gRPC
	// service other than "liveness"), so it runs the checks.
	readinessLike := rp != nil && (rp.HTTPGet != nil && atPath(rp.HTTPGet.Path, rc.ReadinessPath, false) ||
		rp.GRPC != nil && grpcService(rp.GRPC) != grpcLiveness)
	if !readinessLike {
		fix := "add readinessProbe: httpGet " + rc.ReadinessPath + " (starting, failed and draining are 503 there)"
		switch {
		case rp == nil:
			add("readiness-path", "no readinessProbe: the pod is marked ready as soon as it listens, and the drain's 503 is never seen", fix)
		case rp.GRPC != nil:
			add("readiness-path", fmt.Sprintf("readinessProbe is %s, which answers like %s: SERVING as soon as the process listens, while a critical dependency is down and through the drain", probeSummary(rp), live),
				`set readinessProbe.grpc.service: readiness (or "", or a registered service's name), which answers like `+rc.ReadinessPath)
		case rp.HTTPGet != nil && !servedPath(rp.HTTPGet.Path, rc):
			add("readiness-path", fmt.Sprintf("readinessProbe is httpGet %s, a path lameduck does not answer (its readiness path is %s, %sREADINESS_PATH): the probe gets 404 and the pod never becomes ready",
				rp.HTTPGet.Path, rc.ReadinessPath, rc.EnvPrefix),
				"point readinessProbe at httpGet "+rc.ReadinessPath)
		default:
			add("readiness-path", "readinessProbe is "+probeSummary(rp)+": the pod is marked ready as soon as it listens, and the drain's 503 is never seen", fix)
		}
	}
	if readinessLike && !runner {
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
	if readinessLike && !runner && rc.CheckMaxAge > 0 {
		detect := probeSpan(0, rp.PeriodSeconds, rp.FailureThreshold)
		if rc.CheckMaxAge >= detect {
			late := rc.CheckMaxAge + detect
			if late < 0 { // both are positive: it wrapped
				late = math.MaxInt64
			}
			add("readiness-max-age", fmt.Sprintf("%sCHECK_MAX_AGE=%s ≥ readinessProbe periodSeconds × failureThreshold = %s: a failing dependency is reported up to %s late, so the pod leaves the endpoints up to %s after the outage began instead of %s",
				rc.EnvPrefix, rc.CheckMaxAge, detect, rc.CheckMaxAge, late, detect),
				fmt.Sprintf("lower %sCHECK_MAX_AGE well under %s (a third of it: %s), or raise the probe's failureThreshold", rc.EnvPrefix, detect, (detect/3).Round(time.Second)))
		}
	}

	// Boot: STARTUP_TIMEOUT bounds it when set.
	if boot := rc.StartupTimeout; boot > 0 && res.Sources["STARTUP_TIMEOUT"] != "" && !strings.HasPrefix(res.Sources["STARTUP_TIMEOUT"], "default") {
		if sp := c.StartupProbe; sp == nil {
			if lp := c.LivenessProbe; lp != nil {
				allow := probeSpan(lp.InitialDelaySeconds, lp.PeriodSeconds, lp.FailureThreshold)
				if allow < boot {
					add("startup-probe", fmt.Sprintf("boot may take %s (%sSTARTUP_TIMEOUT) but with no startupProbe liveness fails after %s (initialDelaySeconds + periodSeconds × failureThreshold): a CrashLoop that reads like an application bug",
						boot, rc.EnvPrefix, allow),
						fmt.Sprintf("add startupProbe: httpGet %s, periodSeconds 5, failureThreshold %d", rc.StartupPath, int64(math.Ceil(boot.Seconds()/5))+1))
				}
			}
		} else {
			allow := probeSpan(sp.InitialDelaySeconds, sp.PeriodSeconds, sp.FailureThreshold)
			if allow < boot {
				add("startup-probe", fmt.Sprintf("startupProbe allows %s (initialDelaySeconds + periodSeconds × failureThreshold) but boot may take %s (%sSTARTUP_TIMEOUT): the kubelet kills the pod first",
					allow, boot, rc.EnvPrefix),
					fmt.Sprintf("raise startupProbe.failureThreshold to %d", int64(math.Ceil((boot-time.Duration(sp.InitialDelaySeconds)*time.Second).Seconds()/float64(nz(sp.PeriodSeconds, defaultPeriod))))+1))
			}
		}
	}
	// The preStop hook.
	if ps.execSleep {
		long := ps.d.String() + " before SIGTERM"
		switch {
		case ps.forever:
			long = "never returning"
		case ps.unknown:
			long = "at least " + ps.d.String() + " before SIGTERM, with an operand vet cannot read"
		}
		add("prestop-sleep", fmt.Sprintf("preStop runs `%s` (%s): a distroless or scratch image has no shell nor sleep, the hook fails (FailedPreStopHook) with no pause at all, and /readyz stays 200 while it sleeps",
			strings.Join(ps.hook.Exec.Command, " "), long),
			fmt.Sprintf("use preStop httpGet /prestop with a %sPRESTOP_TOKEN from a Secret (or %sPRESTOP=true with the probes on %sPROBE_ADDR): it flips readiness at once and its wait is the window, not added to it", rc.EnvPrefix, rc.EnvPrefix, rc.EnvPrefix))
	}
	hook := ps.hook
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

// grpcLiveness is the gRPC health service name that answers like the
// liveness path (docs/grpc.md); every other name lameduck answers
// ("", "readiness", each registered service) answers like the readiness
// path, and vet takes an unknown name as one of the registered services.
const grpcLiveness = "liveness"

// grpcService returns the service name a gRPC probe asks ("" when unset).
func grpcService(g *corev1.GRPCAction) string {
	if g.Service == nil {
		return ""
	}
	return *g.Service
}

// servedPath reports whether lameduck answers a probe's path: the
// readiness path and its sub-paths, a liveness path, the startup path or
// the preStop path.
func servedPath(path string, rc lameduck.Config) bool {
	return atPath(path, rc.ReadinessPath, true) || atPath(path, rc.StartupPath, false) || atPath(path, rc.PreStopPath, false) ||
		slices.ContainsFunc(rc.LivenessPaths, func(l string) bool { return atPath(path, l, false) })
}

// atPath reports whether a probe's path (which may carry a query) is base,
// or, with sub, one of base's sub-paths (/readyz/<check>).
func atPath(path, base string, sub bool) bool {
	p, _, _ := strings.Cut(path, "?")
	return p == base || sub && strings.HasPrefix(p, base+"/")
}
