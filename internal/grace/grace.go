// Package grace is the grace-period arithmetic of a lameduck process, over
// plain values (docs/probes-and-shutdown.md, "Sizing
// terminationGracePeriodSeconds"):
//
//	preStop sleep + longest window + teardown ≤ terminationGracePeriodSeconds
//
// The kubelet runs the preStop hook, then sends SIGTERM, and sends SIGKILL
// when the grace period ends, whatever the process is doing
// (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle, "Termination
// of Pods").
//
// It is the one implementation of that arithmetic: package lameduck makes
// Run's first log line with it and derives its default teardown from the
// same margin; package worker derives a runner's defaults from that margin;
// lameduck vet builds a Budget from the configuration lameduck.Resolve
// returns for a container and checks it against the manifest. It imports
// only the standard library and holds no state.
package grace

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// DefaultTerminationGrace is Kubernetes' default
// terminationGracePeriodSeconds, 30s: what is assumed inside Kubernetes
// when the pod's grace period is unknown.
const DefaultTerminationGrace = 30 * time.Second

// MinDefaultTeardown is the least teardown a default derived from the
// grace period gives: a zero budget would cut every request at once.
const MinDefaultTeardown = time.Second

// Margin is the part of the grace period a default teardown leaves
// unused, for the process to exit after Run returns and for the kubelet's
// own delays: a tenth of the grace period, at least 2s and at most 10s.
func Margin(grace time.Duration) time.Duration {
	return min(max(grace/10, 2*time.Second), 10*time.Second)
}

// RunnerWindow is the name a runner's drain bound (package worker) has in
// the sum, where a server's window is "delay" or "idle drain bound".
const RunnerWindow = "runner drain bound"

// LongestWindow is the longest the lame-duck window can last: the delay
// (a negative one, lameduck.NoDelay, is zero), or, when drainBound is set
// (the idle drain, a runner's drain), the drain's bound, and never less
// than the delay.
func LongestWindow(delay, drainTimeout time.Duration, drainBound bool) time.Duration {
	d := max(delay, 0)
	if drainBound {
		return max(drainTimeout, d)
	}
	return d
}

// Settings are the resolved settings a Budget is made of: the fields of a
// resolved lameduck.Config of the same names, and the rules that chose
// them. Every duration is a time.Duration.
type Settings struct {
	// EnvPrefix is the prefix of the variables named in Budget.String
	// and Budget.Fix.
	EnvPrefix string
	// Kubernetes reports whether the process runs with the in-cluster
	// defaults (Config.Env "kubernetes"): an unknown grace period is then
	// DefaultTerminationGrace.
	Kubernetes bool
	// PreStopDelay, ShutdownDelay, DrainTimeout, ShutdownTeardown and
	// TerminationGrace are Config's (TerminationGrace zero: unknown).
	PreStopDelay, ShutdownDelay, DrainTimeout, ShutdownTeardown, TerminationGrace time.Duration
	// IdleDrain reports the idle drain (Config.DrainMode "idle"): the
	// window is bounded by DrainTimeout.
	IdleDrain bool
	// RunnerWindow, when set, names the window in the sum (RunnerWindow
	// for a runner): the window is a runner's drain, bounded by
	// DrainTimeout.
	RunnerWindow string
	// Sources maps a setting's name after the prefix to the rule that
	// chose its value, as lameduck.Resolved.Sources does.
	Sources map[string]string
}

// Budget is the grace-period arithmetic of one resolved configuration.
// Its zero value is an empty sum that fits. It is a plain value: its
// methods return copies and are safe for concurrent use.
type Budget struct {
	// EnvPrefix is the prefix of the variables named in String and Fix.
	EnvPrefix string
	// PreStop is the preStop sleep before SIGTERM (Config.PreStopDelay).
	PreStop time.Duration
	// Window is the longest the lame-duck window can last (LongestWindow).
	Window time.Duration
	// WindowSetting names the setting that bounds Window, after the prefix:
	// "SHUTDOWN_DELAY" or "DRAIN_TIMEOUT".
	WindowSetting string
	// Teardown is Config.ShutdownTeardown.
	Teardown time.Duration
	// Total is PreStop + Window + Teardown, saturated at the largest
	// time.Duration: the longest the pod can take from the start of its
	// termination to the exit.
	Total time.Duration
	// Grace is the grace period Total is checked against: TerminationGrace,
	// or inside Kubernetes DefaultTerminationGrace when that is unknown.
	// Zero outside Kubernetes with no grace period given: nothing to check.
	Grace time.Duration
	// GraceKnown reports whether Grace was given (TerminationGrace, or
	// Against) rather than assumed.
	GraceKnown bool
	// Margin is Grace − Total: what is left before SIGKILL; negative when
	// the sequence does not fit. Zero when Grace is zero.
	Margin time.Duration
	// Fits reports whether Total ≤ Grace (true when there is no Grace).
	Fits bool
	// Sources maps each number's setting, after the prefix
	// ("SHUTDOWN_DELAY", "SHUTDOWN_TEARDOWN", "TERMINATION_GRACE",
	// "PRESTOP_DELAY", "DRAIN_TIMEOUT", "JOIN_BUDGET"), to the rule that
	// chose it.
	Sources map[string]string

	// windowName names Window in Sum when a runner's drain bounds it.
	windowName string
}

// Of returns the budget of s, checked against its grace period when one is
// known or assumed.
func Of(s Settings) Budget {
	drainBound := s.IdleDrain || s.RunnerWindow != ""
	b := Budget{
		EnvPrefix: s.EnvPrefix, windowName: s.RunnerWindow,
		PreStop: s.PreStopDelay, Window: LongestWindow(s.ShutdownDelay, s.DrainTimeout, drainBound), WindowSetting: "SHUTDOWN_DELAY",
		Teardown: s.ShutdownTeardown,
		Sources:  map[string]string{},
	}
	if drainBound {
		b.WindowSetting = "DRAIN_TIMEOUT"
	}
	for _, k := range []string{"SHUTDOWN_DELAY", "SHUTDOWN_TEARDOWN", "TERMINATION_GRACE", "PRESTOP_DELAY", "DRAIN_TIMEOUT", "JOIN_BUDGET"} {
		if r, ok := s.Sources[k]; ok {
			b.Sources[k] = r
		}
	}
	b.Total = b.total()
	switch {
	case s.TerminationGrace > 0:
		b = b.Against(s.TerminationGrace)
	case s.Kubernetes:
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
// bound" in the idle drain, the runner's name for it in a runner's drain;
// preStop is left out when zero).
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
