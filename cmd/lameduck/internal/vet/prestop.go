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

	corev1 "k8s.io/api/core/v1"
)

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

// preStopHTTP returns c's preStop hook over HTTP, or nil.
func preStopHTTP(c corev1.Container) *corev1.HTTPGetAction {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return nil
	}
	return c.Lifecycle.PreStop.HTTPGet
}

// hookText names a preStop hook that sleeps: "runs `sleep infinity`" or
// "sleeps N seconds".
func hookText(h *corev1.LifecycleHandler) string {
	if h.Exec != nil {
		return "runs `" + strings.Join(h.Exec.Command, " ") + "`, which"
	}
	return fmt.Sprintf("sleeps %d seconds, which", h.Sleep.Seconds)
}

// checkPreStopSleep is prestop-sleep: an exec hook that sleeps needs a
// shell or a sleep binary, and keeps readiness at 200 while it sleeps. At
// the line of the hook.
func checkPreStopSleep(j *judged) []Finding {
	ps, rc := j.ps, j.rc
	if !ps.execSleep {
		return nil
	}
	long := ps.d.String() + " before SIGTERM"
	switch {
	case ps.forever:
		long = "never returning"
	case ps.unknown:
		long = "at least " + ps.d.String() + " before SIGTERM, with an operand vet cannot read"
	}
	values := map[string]any{"command": strings.Join(ps.hook.Exec.Command, " "), "unknown_operand": ps.unknown, "forever": ps.forever}
	if !ps.forever {
		values["sleep_seconds"] = seconds(ps.d)
	}
	line, path := j.field("lifecycle", "preStop")
	return []Finding{j.finding("prestop-sleep", line, path,
		fmt.Sprintf("preStop runs `%s` (%s): a distroless or scratch image has no shell nor sleep, the hook fails (FailedPreStopHook) with no pause at all, and /readyz stays 200 while it sleeps",
			strings.Join(ps.hook.Exec.Command, " "), long),
		fmt.Sprintf("use preStop httpGet /prestop with a %sPRESTOP_TOKEN from a Secret (or %sPRESTOP=true with the probes on %sPROBE_ADDR): it flips readiness at once and its wait is the window, not added to it", rc.EnvPrefix, rc.EnvPrefix, rc.EnvPrefix),
		values)}
}

// checkPreStopHook is prestop-hook: an HTTP hook on /prestop must find the
// hook served and carry its token. At the line of the hook.
func checkPreStopHook(j *judged) []Finding {
	rc := j.rc
	h := preStopHTTP(j.c)
	if h == nil || !atPath(h.Path, rc.PreStopPath, false) {
		return nil
	}
	line, path := j.field("lifecycle", "preStop")
	switch {
	case !rc.PreStop:
		return []Finding{j.finding("prestop-hook", line, path,
			"preStop is httpGet /prestop but the process does not serve it (LAMEDUCK_PRESTOP unset and no token): the hook gets 404 and the drain starts only at SIGTERM",
			fmt.Sprintf("set %sPRESTOP_TOKEN from a Secret and the same value in the hook's %s header (or %sPRESTOP=true with the probes on %sPROBE_ADDR)", rc.EnvPrefix, tokenHeader, rc.EnvPrefix, rc.EnvPrefix),
			map[string]any{"path": h.Path, "status": 404})}
	case rc.PreStopToken != "" && !slices.ContainsFunc(h.HTTPHeaders, func(hd corev1.HTTPHeader) bool {
		return strings.EqualFold(hd.Name, tokenHeader) && hd.Value != ""
	}):
		return []Finding{j.finding("prestop-hook", line, path,
			"preStop is httpGet /prestop without an "+tokenHeader+" header, but the process requires a token: the hook gets 401 and the drain starts only at SIGTERM",
			"add httpHeaders: [{name: "+tokenHeader+", value: <the token>}] to the hook",
			map[string]any{"path": h.Path, "status": 401})}
	}
	return nil
}
