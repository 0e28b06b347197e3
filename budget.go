package lameduck

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// DefaultTerminationGrace is Kubernetes' default terminationGracePeriodSeconds
// (30s; kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle,
// "Termination of Pods"): what lameduck assumes inside Kubernetes when
// Config.TerminationGrace is unknown.
const DefaultTerminationGrace = 30 * time.Second

// Budget is the grace-period arithmetic of a resolved configuration
// (docs/probes-and-shutdown.md, "Sizing terminationGracePeriodSeconds"):
//
//	preStop sleep + longest window + teardown ≤ terminationGracePeriodSeconds
//
// The kubelet runs the preStop hook, then sends SIGTERM, and sends SIGKILL
// when the grace period ends, whatever the process is doing
// (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle, "Termination
// of Pods"). Run logs a Budget at start; lameduck vet checks one against a
// manifest. All durations are time.Durations.
type Budget struct {
	// EnvPrefix is the prefix of the variables named in String and Fix.
	EnvPrefix string
	// Env is the environment the defaults were chosen for.
	Env string
	// PreStop is the preStop sleep before SIGTERM (Config.PreStopDelay).
	PreStop time.Duration
	// Window is the longest the lame-duck window can last: ShutdownDelay,
	// or DrainTimeout in DrainIdle mode.
	Window time.Duration
	// WindowSetting names the setting that bounds Window, after the prefix:
	// "SHUTDOWN_DELAY" or "DRAIN_TIMEOUT".
	WindowSetting string
	// Teardown is Config.ShutdownTeardown.
	Teardown time.Duration
	// Total is PreStop + Window + Teardown: the longest the pod can take
	// from the start of its termination to the exit.
	Total time.Duration
	// Grace is the grace period Total is checked against: TerminationGrace,
	// or inside Kubernetes DefaultTerminationGrace when that is unknown.
	// Zero outside Kubernetes with no grace period given: nothing to check.
	Grace time.Duration
	// GraceKnown reports whether Grace was given (Config.TerminationGrace,
	// or Against) rather than assumed.
	GraceKnown bool
	// Margin is Grace − Total: what is left before SIGKILL; negative when
	// the sequence does not fit. Zero when Grace is zero.
	Margin time.Duration
	// Fits reports whether Total ≤ Grace (true when there is no Grace).
	Fits bool
	// windowName names Window in Sum when a runner's drain bounds it.
	windowName string
	// Sources maps each number's setting, after the prefix
	// ("SHUTDOWN_DELAY", "SHUTDOWN_TEARDOWN", "TERMINATION_GRACE",
	// "PRESTOP_DELAY", "DRAIN_TIMEOUT", "JOIN_BUDGET"), to the rule that
	// chose it, as in Resolved.Sources.
	Sources map[string]string
}

// Budget returns the grace-period arithmetic of r's configuration. Run's
// first log line is made from it.
func (r Resolved) Budget() Budget {
	c := &r.Config
	b := Budget{
		EnvPrefix: c.EnvPrefix, Env: c.Env, windowName: c.windowName(),
		PreStop: c.PreStopDelay, Window: c.maxWindow(), WindowSetting: "SHUTDOWN_DELAY",
		Teardown: c.ShutdownTeardown,
		Sources:  map[string]string{},
	}
	if c.DrainMode == DrainIdle || b.windowName != "" {
		b.WindowSetting = "DRAIN_TIMEOUT"
	}
	for _, k := range []string{"SHUTDOWN_DELAY", "SHUTDOWN_TEARDOWN", "TERMINATION_GRACE", "PRESTOP_DELAY", "DRAIN_TIMEOUT", "JOIN_BUDGET"} {
		if s, ok := r.Sources[k]; ok {
			b.Sources[k] = s
		}
	}
	b.Total = b.total()
	switch {
	case c.TerminationGrace > 0:
		b = b.Against(c.TerminationGrace)
	case c.Env == EnvKubernetes:
		b = b.Against(DefaultTerminationGrace)
		b.GraceKnown = false
		b.Sources["TERMINATION_GRACE"] = "unknown: Kubernetes' default assumed"
	default:
		b.Fits = true
	}
	return b
}

// Against returns b checked against grace, a pod's
// terminationGracePeriodSeconds, as lameduck vet does with the value in a
// manifest. The numbers of the sequence are unchanged: only Grace,
// GraceKnown, Margin and Fits are.
func (b Budget) Against(grace time.Duration) Budget {
	b.Grace, b.GraceKnown = grace, true
	b.Total = b.total()
	b.Margin = grace - b.Total
	b.Fits = b.Total <= grace
	return b
}

// WithPreStop returns b with d as the preStop sleep the kubelet runs before
// SIGTERM, which the process itself may not know: lameduck vet reads it from
// a manifest's exec hook. PreStop and Total change, and with them Margin and
// Fits when b has a grace period; the teardown stays what the process
// resolved (its default was derived without d when
// LAMEDUCK_PRESTOP_DELAY was not set, which is how such a pod overruns).
// A negative d is taken as zero.
func (b Budget) WithPreStop(d time.Duration) Budget {
	b.PreStop = max(d, 0)
	b.Total = b.total()
	if b.Grace > 0 {
		b.Margin = b.Grace - b.Total
		b.Fits = b.Total <= b.Grace
	}
	return b
}

// total is the sum the grace period must hold: preStop + window + teardown,
// saturated at the largest time.Duration (a manifest's preStop sleep can be
// centuries long) rather than wrapped to a negative sum that would fit.
func (b Budget) total() time.Duration {
	t := b.PreStop
	for _, d := range []time.Duration{b.Window, b.Teardown} {
		if d > math.MaxInt64-t {
			return math.MaxInt64
		}
		t += d
	}
	return t
}

// Sum returns the addition, such as
// "preStop 0s + delay 5s + teardown 22s = 27s" (the window is "idle drain
// bound" in DrainIdle mode; preStop is left out when zero).
func (b Budget) Sum() string {
	var s strings.Builder
	if b.PreStop > 0 {
		fmt.Fprintf(&s, "preStop %s + ", b.PreStop)
	}
	name := "delay"
	switch {
	case b.windowName != "":
		name = b.windowName
	case b.WindowSetting == "DRAIN_TIMEOUT":
		name = "idle drain bound"
	}
	fmt.Fprintf(&s, "%s %s + teardown %s = %s", name, b.Window, b.Teardown, b.Total)
	return s.String()
}

// String returns the verdict in one line, as Run logs it: the sum, the
// grace period it is checked against and the margin, or why it does not
// fit and the fix.
func (b Budget) String() string {
	switch {
	case b.Grace == 0:
		return "shutdown budget " + b.Sum()
	case !b.Fits && b.GraceKnown:
		return fmt.Sprintf("shutdown budget does not fit: %s > terminationGracePeriodSeconds %s; "+
			"the kubelet will SIGKILL the pod mid-teardown; %s", b.Sum(), b.Grace, b.Fix())
	case !b.Fits:
		return fmt.Sprintf("shutdown budget %s exceeds Kubernetes' default terminationGracePeriodSeconds %s; "+
			"set %sTERMINATION_GRACE to the pod's value to check it, and %s", b.Sum(), b.Grace, b.EnvPrefix, b.Fix())
	case b.GraceKnown:
		return fmt.Sprintf("shutdown budget %s ≤ terminationGracePeriodSeconds %s (margin %s)", b.Sum(), b.Grace, b.Margin)
	default:
		return fmt.Sprintf("shutdown budget %s ≤ Kubernetes' default terminationGracePeriodSeconds %s (margin %s; set %sTERMINATION_GRACE to the pod's value)",
			b.Sum(), b.Grace, b.Margin, b.EnvPrefix)
	}
}

// Fix returns what to change when the budget does not fit ("" when it
// fits): the settings to lower, or the grace period to raise.
func (b Budget) Fix() string {
	if b.Fits {
		return ""
	}
	lower := b.EnvPrefix + b.WindowSetting + " or " + b.EnvPrefix + "SHUTDOWN_TEARDOWN"
	if b.PreStop > 0 {
		lower = "the preStop sleep, " + b.EnvPrefix + b.WindowSetting + " or " + b.EnvPrefix + "SHUTDOWN_TEARDOWN"
	}
	return fmt.Sprintf("lower %s, or raise terminationGracePeriodSeconds to at least %s", lower, b.Total)
}

// logBudget logs the resolved settings and the grace-period arithmetic
// (docs/probes-and-shutdown.md, "Sizing terminationGracePeriodSeconds"),
// made by Resolved.Budget, the function lameduck vet uses: the preStop
// sleep, the longest window (the delay, or the idle drain's bound) and the
// teardown budget must fit terminationGracePeriodSeconds, or the kubelet
// SIGKILLs the pod mid-drain. Each number comes with the rule that chose it.
func (l *Lifecycle) logBudget() {
	c, b := &l.cfg, l.budget
	join := "what the teardown leaves"
	if c.JoinBudget > 0 {
		join = c.JoinBudget.String()
	}
	attrs := []any{"env", c.Env, "drain_mode", c.DrainMode, "window", b.Window.String(), "teardown", b.Teardown.String(),
		"join_budget", join, "budget", b.Total.String(), "prestop", c.PreStop}
	if c.Extension != nil && c.Extension.LogAttrs != nil {
		attrs = append(attrs, c.Extension.LogAttrs()...)
	} else {
		attrs = append(attrs, "not_ready_at", c.NotReadyAt)
	}
	if b.PreStop > 0 {
		attrs = append(attrs, "prestop_delay", b.PreStop.String())
	}
	if b.Grace > 0 {
		attrs = append(attrs, "termination_grace", b.Grace.String(), "margin", b.Margin.String())
	}
	for _, r := range []struct{ key, setting string }{
		{"window_rule", b.WindowSetting}, {"teardown_rule", "SHUTDOWN_TEARDOWN"}, {"grace_rule", "TERMINATION_GRACE"},
	} {
		if s, ok := b.Sources[r.setting]; ok {
			attrs = append(attrs, r.key, s)
		}
	}
	if b.Fits {
		l.log.Info("lameduck: "+b.String(), attrs...)
	} else {
		l.log.Warn("lameduck: "+b.String(), attrs...)
	}
}
