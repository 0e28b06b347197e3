package vet

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lameduck/lameduck"
	corev1 "k8s.io/api/core/v1"
)

// The gRPC health service names lameduck answers (docs/grpc.md):
// grpcLiveness answers like the liveness path; every other name ("",
// grpcReadiness, each registered service) answers like the readiness
// path, and vet takes an unknown name as one of the registered services.
const (
	grpcLiveness  = "liveness"
	grpcReadiness = "readiness"
)

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
func servedPath(path string, rc *lameduck.Config) bool {
	return atPath(path, rc.ReadinessPath, true) || atPath(path, rc.StartupPath, false) || atPath(path, rc.PreStopPath, false) ||
		livenessPath(path, rc)
}

func livenessPath(path string, rc *lameduck.Config) bool {
	return slices.ContainsFunc(rc.LivenessPaths, func(l string) bool { return atPath(path, l, false) })
}

// atPath reports whether a probe's path (which may carry a query) is base,
// or, with sub, one of base's sub-paths (/readyz/<check>).
func atPath(path, base string, sub bool) bool {
	p, _, _ := strings.Cut(path, "?")
	return p == base || sub && strings.HasPrefix(p, base+"/")
}

func probeSummary(p *corev1.Probe) string {
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

// readinessLike reports whether p asks lameduck's readiness (/readyz or a
// sub-path, or a gRPC service other than liveness), so it runs the checks.
func readinessLike(p *corev1.Probe, rc *lameduck.Config) bool {
	return p != nil && (p.HTTPGet != nil && atPath(p.HTTPGet.Path, rc.ReadinessPath, true) ||
		p.GRPC != nil && grpcService(p.GRPC) != grpcLiveness)
}

// livenessLike reports whether p asks lameduck's liveness (a liveness
// path, or the gRPC service liveness).
func livenessLike(p *corev1.Probe, rc *lameduck.Config) bool {
	return p != nil && (p.HTTPGet != nil && livenessPath(p.HTTPGet.Path, rc) ||
		p.GRPC != nil && grpcService(p.GRPC) == grpcLiveness)
}

// pairKind says how the liveness and readiness probes relate.
type pairKind int

const (
	pairDistinct  pairKind = iota
	pairIdentical          // the same handler: path (or service) and port
	pairSwapped            // liveness asks readiness and readiness asks liveness
)

// probePair classifies the container's liveness and readiness probes.
// When they are identical or swapped, one finding names both and the
// per-probe path rules stay silent.
func (j *judged) probePair() pairKind {
	lp, rp := j.c.LivenessProbe, j.c.ReadinessProbe
	if lp == nil || rp == nil {
		return pairDistinct
	}
	switch {
	case readinessLike(lp, j.rc) && livenessLike(rp, j.rc):
		return pairSwapped
	case lp.HTTPGet != nil && rp.HTTPGet != nil:
		lpath, _, _ := strings.Cut(lp.HTTPGet.Path, "?")
		rpath, _, _ := strings.Cut(rp.HTTPGet.Path, "?")
		if lpath == rpath && j.samePort(lp.HTTPGet.Port.String(), rp.HTTPGet.Port.String()) {
			return pairIdentical
		}
	case lp.GRPC != nil && rp.GRPC != nil:
		if lp.GRPC.Port == rp.GRPC.Port && grpcService(lp.GRPC) == grpcService(rp.GRPC) {
			return pairIdentical
		}
	}
	return pairDistinct
}

// samePort reports whether two probe ports, as written, are one port.
func (j *judged) samePort(a, b string) bool {
	pa, oka := resolvePortText(a, j.c.Ports)
	pb, okb := resolvePortText(b, j.c.Ports)
	if oka && okb {
		return pa == pb
	}
	return a == b
}

// probeWhere is "httpGet /readyz on port http" or "grpc service "" on port 9000".
func probeWhere(p *corev1.Probe) string {
	switch {
	case p.HTTPGet != nil:
		return fmt.Sprintf("httpGet %s on port %s", p.HTTPGet.Path, p.HTTPGet.Port.String())
	case p.GRPC != nil:
		return fmt.Sprintf("grpc service %q on port %d", grpcService(p.GRPC), p.GRPC.Port)
	}
	return probeSummary(p)
}

// checkProbesIdentical is probes-identical: liveness and readiness are
// the same probe (path or gRPC service, and port), at the line of the
// liveness probe (the one the fix usually changes), naming both.
func checkProbesIdentical(j *judged) []Finding {
	if j.probePair() != pairIdentical {
		return nil
	}
	lp := j.c.LivenessProbe
	line, path := j.field("livenessProbe")
	rline, _ := j.field("readinessProbe")
	live, ready := j.rc.LivenessPaths[0], j.rc.ReadinessPath
	var why, fix string
	switch {
	case readinessLike(lp, j.rc):
		why = fmt.Sprintf("it runs the readiness checks and answers 503 (NOT_SERVING) from the shutdown signal on, so as liveness it makes the kubelet restart every pod in a dependency outage and kill a draining one")
		fix = fmt.Sprintf("point livenessProbe at %s (grpc service %s), which runs no check and stays 200 through the drain", live, grpcLiveness)
	case livenessLike(lp, j.rc):
		why = "it runs no check and stays 200 through the drain, so as readiness the pod is ready as soon as it listens, while a critical dependency is down and while it drains"
		fix = fmt.Sprintf("point readinessProbe at %s (grpc service %s), which says starting, failed and draining", ready, grpcReadiness)
	default:
		why = "one answer cannot say both \"restart me\" and \"do not route to me\""
		fix = fmt.Sprintf("livenessProbe on %s, readinessProbe on %s", live, ready)
	}
	return []Finding{j.finding("probes-identical", line, path,
		fmt.Sprintf("livenessProbe (line %d) and readinessProbe (line %d) are the same probe, %s: %s", line, rline, probeWhere(lp), why),
		fix, j.pairValues())}
}

// checkProbesSwapped is probes-swapped: liveness asks the readiness
// question and readiness the liveness one, at the line of the liveness
// probe, naming both.
func checkProbesSwapped(j *judged) []Finding {
	if j.probePair() != pairSwapped {
		return nil
	}
	lp, rp := j.c.LivenessProbe, j.c.ReadinessProbe
	line, path := j.field("livenessProbe")
	rline, _ := j.field("readinessProbe")
	return []Finding{j.finding("probes-swapped", line, path,
		fmt.Sprintf("livenessProbe (line %d) is %s and readinessProbe (line %d) is %s: the probes are swapped, so the kubelet restarts every pod when a critical dependency is down and kills a draining one, while readiness stays green through the drain and routes to a pod that is going away",
			line, probeWhere(lp), rline, probeWhere(rp)),
		fmt.Sprintf("swap them: livenessProbe on %s (or grpc service %s), readinessProbe on %s (or grpc service %s)", j.rc.LivenessPaths[0], grpcLiveness, j.rc.ReadinessPath, grpcReadiness),
		j.pairValues())}
}

// pairValues are the two probes and their lines, for Finding.Values.
func (j *judged) pairValues() map[string]any {
	line, _ := j.field("livenessProbe")
	rline, _ := j.field("readinessProbe")
	return map[string]any{"liveness": probeWhere(j.c.LivenessProbe), "readiness": probeWhere(j.c.ReadinessProbe), "liveness_line": line, "readiness_line": rline}
}

// checkLivenessPath is liveness-path: the liveness probe must not run the
// readiness checks nor start the drain, and a runner's must not be a TCP
// check; at the line of the liveness probe.
func checkLivenessPath(j *judged) []Finding {
	lp := j.c.LivenessProbe
	if lp == nil || j.probePair() != pairDistinct {
		return nil
	}
	rc := j.rc
	live := rc.LivenessPaths[0] // the paths the binary answers (LAMEDUCK_*_PATH)
	line, path := j.field("livenessProbe")
	add := func(msg, fix string) []Finding {
		return []Finding{j.finding("liveness-path", line, path, msg, fix, map[string]any{"probe": "livenessProbe", "handler": probeWhere(lp), "want": live})}
	}
	switch {
	case lp.HTTPGet != nil && atPath(lp.HTTPGet.Path, rc.ReadinessPath, true):
		return add(fmt.Sprintf("livenessProbe is httpGet %s, which runs the readiness checks: a dependency outage, or the drain's 503, makes the kubelet restart every pod", lp.HTTPGet.Path),
			"point livenessProbe at "+live+", which runs no check and stays 200 through the drain")
	case lp.HTTPGet != nil && atPath(lp.HTTPGet.Path, rc.PreStopPath, false):
		return add("livenessProbe is httpGet "+lp.HTTPGet.Path+", which starts the shutdown", "point livenessProbe at "+live)
	case lp.GRPC != nil && grpcService(lp.GRPC) != grpcLiveness:
		return add(fmt.Sprintf("livenessProbe is %s, which answers like %s: NOT_SERVING while a critical check fails and from the shutdown signal on, so the kubelet restarts every pod in an outage and kills a draining one",
			probeSummary(lp), rc.ReadinessPath),
			fmt.Sprintf("set livenessProbe.grpc.service: %s, which answers like %s and stays SERVING through the drain", grpcLiveness, live))
	case j.runner && lp.TCPSocket != nil:
		return add("a runner's livenessProbe is a tcpSocket check, which passes while the consume loop is wedged",
			"use httpGet "+live+" on the probe port (LAMEDUCK_PROBE_ADDR, :9090), which reports the consume loop")
	}
	return nil
}

// checkReadinessPath is readiness-path: a readiness probe that asks
// lameduck's readiness, at the line of the readiness probe (of the
// container when it has none).
func checkReadinessPath(j *judged) []Finding {
	rp := j.c.ReadinessProbe
	if readinessLike(rp, j.rc) || j.probePair() != pairDistinct {
		return nil
	}
	rc := j.rc
	live := rc.LivenessPaths[0]
	line, path := j.field("readinessProbe")
	add := func(msg, fix string) []Finding {
		v := map[string]any{"probe": "readinessProbe", "want": rc.ReadinessPath}
		if rp != nil {
			v["handler"] = probeWhere(rp)
		}
		return []Finding{j.finding("readiness-path", line, path, msg, fix, v)}
	}
	fix := "add readinessProbe: httpGet " + rc.ReadinessPath + " (starting, failed and draining are 503 there)"
	switch {
	case rp == nil && j.runner:
		return add(fmt.Sprintf("no readinessProbe: a runner takes no traffic, but its readiness is how it tells its state: READY 0/1 in kubectl get pods while it drains (for hours, maybe) or is superseded by a newer epoch, and what a rollout waits for before it stops the next old runner; without one every runner counts as ready as soon as it starts, draining or not"),
			fmt.Sprintf("add readinessProbe: httpGet %s on the probe port (%s, %s)", rc.ReadinessPath, rc.ProbeAddr, j.res.Sources["PROBE_ADDR"]))
	case rp == nil:
		return add("no readinessProbe: the pod is marked ready as soon as it listens, and the drain's 503 is never seen", fix)
	case rp.GRPC != nil:
		return add(fmt.Sprintf("readinessProbe is %s, which answers like %s: SERVING as soon as the process listens, while a critical dependency is down and through the drain", probeSummary(rp), live),
			`set readinessProbe.grpc.service: readiness (or "", or a registered service's name), which answers like `+rc.ReadinessPath)
	case rp.HTTPGet != nil && !servedPath(rp.HTTPGet.Path, rc):
		return add(fmt.Sprintf("readinessProbe is httpGet %s, a path lameduck does not answer (its readiness path is %s, %sREADINESS_PATH): the probe gets 404 and the pod never becomes ready",
			rp.HTTPGet.Path, rc.ReadinessPath, rc.EnvPrefix),
			"point readinessProbe at httpGet "+rc.ReadinessPath)
	}
	return add("readinessProbe is "+probeSummary(rp)+": the pod is marked ready as soon as it listens, and the drain's 503 is never seen", fix)
}

// checkReadinessTimeout is readiness-timeout: checks run inside the probe,
// so its timeoutSeconds must exceed the check deadline with room; at the
// line of timeoutSeconds (of the probe when unset).
func checkReadinessTimeout(j *judged) []Finding {
	rp := j.c.ReadinessProbe
	if !readinessLike(rp, j.rc) || j.runner {
		return nil
	}
	rc := j.rc
	timeout := time.Duration(nz(rp.TimeoutSeconds, defaultTimeout)) * time.Second
	want := rc.CheckTimeout + checkTimeoutRoom
	if timeout >= want {
		return nil
	}
	line, path := j.field("readinessProbe", "timeoutSeconds")
	return []Finding{j.finding("readiness-timeout", line, path,
		fmt.Sprintf("readinessProbe timeoutSeconds %d < the check deadline %s (%sCHECK_TIMEOUT) + %s of room: the kubelet gives up before a degraded (200) answer and fails readiness",
			int64(timeout/time.Second), rc.CheckTimeout, rc.EnvPrefix, checkTimeoutRoom),
		fmt.Sprintf("set readinessProbe.timeoutSeconds: %d", ceilSeconds(want)),
		map[string]any{"timeout_seconds": seconds(timeout), "check_timeout_seconds": seconds(rc.CheckTimeout),
			"room_seconds": seconds(checkTimeoutRoom), "want_seconds": ceilSeconds(want)})}
}

// readinessDetect is the longest the kubelet can take, after /readyz has
// flipped to 503, to have seen failureThreshold failures in a row. Its
// prober runs one probe at a time on a ticker of periodSeconds: the probe
// in flight at the flip may still take timeoutSeconds and succeed, the
// ticks it overlapped are dropped but one, and each later probe fails at
// once (/readyz answers draining without running a check). So
// (failureThreshold − 1) × periodSeconds + max(periodSeconds, timeoutSeconds).
func readinessDetect(p *corev1.Probe) time.Duration {
	period, failures := int64(nz(p.PeriodSeconds, defaultPeriod)), int64(nz(p.FailureThreshold, defaultFailures))
	timeout := int64(nz(p.TimeoutSeconds, defaultTimeout))
	d, _ := secondsToDuration(float64((failures-1)*period + max(period, timeout)))
	return d
}

// checkReadinessWindow is readiness-window: the lame-duck window (the
// delay, or the idle drain's minimum) must last until the kubelet can have
// seen readiness flip, or a load balancer that follows readiness (the
// terminating endpoint's serving condition, or its own health check of the
// pod) still routes to it when the listener closes. At the line of the
// readiness probe's periodSeconds (of the probe when unset).
func checkReadinessWindow(j *judged) []Finding {
	rp := j.c.ReadinessProbe
	if !readinessLike(rp, j.rc) || j.runner || j.refused() {
		return nil
	}
	rc := j.rc
	if rc.NotReadyAt == lameduck.NotReadyAtTeardown {
		// Readiness stays 200 through the window: nothing is meant to
		// see a flip before the teardown (the EndpointSlice, not
		// readiness, takes the pod out).
		return nil
	}
	window := max(rc.ShutdownDelay, 0) // lameduck.NoDelay is a zero window
	detect := readinessDetect(rp)
	if window >= detect {
		return nil
	}
	period, failures, timeout := nz(rp.PeriodSeconds, defaultPeriod), nz(rp.FailureThreshold, defaultFailures), nz(rp.TimeoutSeconds, defaultTimeout)
	name := "the lame-duck window"
	if rc.DrainMode == lameduck.DrainIdle {
		name = "the idle drain's minimum window"
	}
	line, path := j.field("readinessProbe", "periodSeconds")
	return []Finding{j.finding("readiness-window", line, path,
		fmt.Sprintf("%s %s (%sSHUTDOWN_DELAY) is shorter than the %s readiness can take to see the flip to 503: (failureThreshold %d − 1) × periodSeconds %d + max(periodSeconds %d, timeoutSeconds %d) = %s; a load balancer that follows readiness may still route to the pod when the window ends and its listener closes",
			name, window, rc.EnvPrefix, detect, failures, period, period, timeout, detect),
		fmt.Sprintf("raise %sSHUTDOWN_DELAY to at least %s (plus the time your load balancer takes to act; the grace period grows with it), or lower readinessProbe periodSeconds or failureThreshold until (failureThreshold − 1) × periodSeconds + max(periodSeconds, timeoutSeconds) ≤ %s",
			rc.EnvPrefix, detect, window),
		map[string]any{"window_seconds": seconds(window), "window_setting": rc.EnvPrefix + "SHUTDOWN_DELAY", "drain_mode": rc.DrainMode,
			"period_seconds": period, "failure_threshold": failures, "timeout_seconds": timeout,
			"detect_seconds": seconds(detect), "short_seconds": seconds(detect - window)})}
}

// checkReadinessMaxAge is readiness-max-age: a result reused for
// CHECK_MAX_AGE delays the detection of an outage by up to that long, so
// it must stay under the time the readiness probe was sized to take a
// failing pod out in. At the line of the variable.
func checkReadinessMaxAge(j *judged) []Finding {
	rp, rc := j.c.ReadinessProbe, j.rc
	if !readinessLike(rp, rc) || j.runner || rc.CheckMaxAge <= 0 {
		return nil
	}
	detect := probeSpan(0, rp.PeriodSeconds, rp.FailureThreshold)
	if rc.CheckMaxAge < detect {
		return nil
	}
	late := rc.CheckMaxAge + detect
	if late < 0 { // both are positive: it wrapped
		late = math.MaxInt64
	}
	line, path := j.envField(rc.EnvPrefix + "CHECK_MAX_AGE")
	return []Finding{j.finding("readiness-max-age", line, path,
		fmt.Sprintf("%sCHECK_MAX_AGE=%s ≥ readinessProbe periodSeconds × failureThreshold = %s: a failing dependency is reported up to %s late, so the pod leaves the endpoints up to %s after the outage began instead of %s",
			rc.EnvPrefix, rc.CheckMaxAge, detect, rc.CheckMaxAge, late, detect),
		fmt.Sprintf("lower %sCHECK_MAX_AGE well under %s (a third of it: %s), or raise the probe's failureThreshold", rc.EnvPrefix, detect, (detect/3).Round(time.Second)),
		map[string]any{"max_age_seconds": seconds(rc.CheckMaxAge), "detect_seconds": seconds(detect), "late_seconds": seconds(late),
			"period_seconds": nz(rp.PeriodSeconds, defaultPeriod), "failure_threshold": nz(rp.FailureThreshold, defaultFailures)})}
}

// checkStartupProbe is startup-probe: when LAMEDUCK_STARTUP_TIMEOUT says
// boot may take long, a startup probe must allow it (or, without one, the
// liveness probe must). At the line of the probe that bounds the boot.
func checkStartupProbe(j *judged) []Finding {
	rc := j.rc
	boot := rc.StartupTimeout
	if src := j.res.Sources["STARTUP_TIMEOUT"]; boot <= 0 || src == "" || strings.HasPrefix(src, "default") {
		return nil
	}
	sp := j.c.StartupProbe
	if sp == nil {
		lp := j.c.LivenessProbe
		if lp == nil {
			return nil
		}
		allow := probeSpan(lp.InitialDelaySeconds, lp.PeriodSeconds, lp.FailureThreshold)
		if allow >= boot {
			return nil
		}
		line, path := j.field("livenessProbe")
		return []Finding{j.finding("startup-probe", line, path,
			fmt.Sprintf("boot may take %s (%sSTARTUP_TIMEOUT) but with no startupProbe liveness fails after %s (initialDelaySeconds + periodSeconds × failureThreshold): a CrashLoop that reads like an application bug",
				boot, rc.EnvPrefix, allow),
			fmt.Sprintf("add startupProbe: httpGet %s, periodSeconds 5, failureThreshold %d", rc.StartupPath, int64(math.Ceil(boot.Seconds()/5))+1),
			map[string]any{"boot_seconds": seconds(boot), "allow_seconds": seconds(allow), "probe": "livenessProbe"})}
	}
	allow := probeSpan(sp.InitialDelaySeconds, sp.PeriodSeconds, sp.FailureThreshold)
	if allow >= boot {
		return nil
	}
	line, path := j.field("startupProbe", "failureThreshold")
	want := int64(math.Ceil((boot-time.Duration(sp.InitialDelaySeconds)*time.Second).Seconds()/float64(nz(sp.PeriodSeconds, defaultPeriod)))) + 1
	return []Finding{j.finding("startup-probe", line, path,
		fmt.Sprintf("startupProbe allows %s (initialDelaySeconds + periodSeconds × failureThreshold) but boot may take %s (%sSTARTUP_TIMEOUT): the kubelet kills the pod first",
			allow, boot, rc.EnvPrefix),
		fmt.Sprintf("raise startupProbe.failureThreshold to %d", want),
		map[string]any{"boot_seconds": seconds(boot), "allow_seconds": seconds(allow), "probe": "startupProbe",
			"period_seconds": nz(sp.PeriodSeconds, defaultPeriod), "failure_threshold": nz(sp.FailureThreshold, defaultFailures), "want_failure_threshold": want})}
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
