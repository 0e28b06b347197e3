package lameduck

import "github.com/lameduck/lameduck/internal/grace"

// budget returns the grace-period arithmetic of c, a resolved Config whose
// rules are src (docs/probes-and-shutdown.md, "Sizing
// terminationGracePeriodSeconds"): internal/grace's, the one lameduck vet
// builds from the Config and Sources that Resolve returns.
func (c *Config) budget(src map[string]string) grace.Budget {
	return grace.Of(grace.Settings{
		EnvPrefix: c.EnvPrefix, Kubernetes: c.Env == EnvKubernetes,
		PreStopDelay: c.PreStopDelay, ShutdownDelay: c.ShutdownDelay, DrainTimeout: c.DrainTimeout,
		ShutdownTeardown: c.ShutdownTeardown, TerminationGrace: c.TerminationGrace,
		IdleDrain: c.DrainMode == DrainIdle, RunnerWindow: c.windowName(),
		Sources: src,
	})
}

// logBudget logs the resolved settings and the grace-period arithmetic
// (docs/probes-and-shutdown.md, "Sizing terminationGracePeriodSeconds"),
// made by internal/grace, the arithmetic lameduck vet uses: the preStop
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
