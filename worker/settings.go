package worker

import (
	"fmt"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/extend"
	"github.com/lameduck/lameduck/internal/grace"
)

// A runner's drain modes, which worker.Config.Lifecycle.DrainMode and
// LAMEDUCK_DRAIN_MODE accept for a runner instead of a server's
// (lameduck.DrainDelay, lameduck.DrainIdle, which a runner refuses).
const (
	// DrainComplete finishes the job in flight after the signal, bounded
	// by DrainTimeout; no new job is taken. The default. See
	// docs/runners.md.
	DrainComplete = "complete"
	// DrainInterrupt cancels the context of the job in flight at the
	// signal, so it can checkpoint, and hands the job back to its queue.
	// See docs/runners.md.
	DrainInterrupt = "interrupt"
)

// A runner's defaults (docs/runners.md, "Configuration").
const (
	// DefaultProbeAddr is where a runner serves its probes when
	// Lifecycle.ProbeAddr and LAMEDUCK_PROBE_ADDR are unset: the metrics
	// port, where /metrics can live too.
	DefaultProbeAddr = ":9090"
	// DefaultDrainTimeout bounds a runner's drain when its grace period is
	// unknown: a job may take hours, and a deploy should not throw its
	// work away.
	DefaultDrainTimeout = 8 * time.Hour
	// DefaultEpochMismatchDelay is how long a superseded runner delays the
	// redelivery of a job it hands back, while the newer fleet becomes
	// ready.
	DefaultEpochMismatchDelay = 2 * time.Minute
	// DefaultFetchWait is how long a consume loop's fetch waits for a job
	// before it returns empty (one idle cycle).
	DefaultFetchWait = 5 * time.Second
	// DefaultFailureBackoff is the delay of a failed job's first
	// redelivery; each later one doubles it, up to
	// DefaultFailureBackoffMax.
	DefaultFailureBackoff = time.Second
	// DefaultFailureBackoffMax caps the delay of a failed job's
	// redelivery.
	DefaultFailureBackoffMax = 5 * time.Minute
)

// defaultTeardown is a runner's teardown when its grace period is unknown
// inside Kubernetes, and the most its default takes of a known one.
const defaultTeardown = 30 * time.Second

// Resolved is a runner's configuration resolved by [Resolve]: the
// Lifecycle's (every field filled, and the rule that chose each value) and
// the runner's own settings.
type Resolved struct {
	lameduck.Resolved
	// Epoch, EpochMismatchDelay and FetchWait are Config's, filled from
	// the environment and the defaults.
	Epoch              uint64
	EpochMismatchDelay time.Duration
	FetchWait          time.Duration
	// FailureBackoff and FailureBackoffMax are Config's, filled likewise.
	FailureBackoff    time.Duration
	FailureBackoffMax time.Duration
}

// Resolve resolves cfg exactly as [New] does — the Lifecycle's settings
// with a runner's rows, defaults and drain modes, the same parsers and the
// same errors — but binds nothing, starts nothing and logs nothing: it is
// lameduck.Resolve for a runner, and lameduck vet judges a runner's
// manifest with it. Set cfg.Lifecycle.LookupEnv and Environ to read other
// variables than the process's own.
//
// It returns every problem, as lameduck.Resolve does, then an error for a
// negative EpochPoll or LivenessFloor. Resolved is filled even with
// errors. It is safe for concurrent use when cfg's LookupEnv and Environ are.
func Resolve(cfg Config) (Resolved, []error) {
	set := cfg.settings()
	lcfg := cfg.Lifecycle
	lcfg.Extension = set.extension(nil)
	res, errs := lameduck.Resolve(lcfg)
	errs = append(errs, cfg.checkOwn()...)
	errs = append(errs, set.check(res.Config.EnvPrefix)...)
	return Resolved{Resolved: res, Epoch: set.Epoch, EpochMismatchDelay: set.EpochMismatchDelay, FetchWait: set.FetchWait,
		FailureBackoff: set.FailureBackoff, FailureBackoffMax: set.FailureBackoffMax}, errs
}

// checkOwn checks the fields no variable sets.
func (cfg Config) checkOwn() []error {
	var errs []error
	if cfg.EpochPoll < 0 {
		errs = append(errs, &lameduck.ConfigError{Setting: "worker.Config.EpochPoll", Value: cfg.EpochPoll.String(),
			Problem: "must not be negative", Fix: "use 0 for the default " + DefaultEpochPoll.String()})
	}
	if cfg.LivenessFloor < 0 {
		errs = append(errs, &lameduck.ConfigError{Setting: "worker.Config.LivenessFloor", Value: cfg.LivenessFloor.String(),
			Problem: "must not be negative", Fix: "use 0 for the default " + DefaultLivenessFloor.String()})
	}
	return errs
}

// settings are a runner's own settings, resolved beside the Lifecycle's.
type settings struct {
	Epoch              uint64
	EpochMismatchDelay time.Duration
	FetchWait          time.Duration
	FailureBackoff     time.Duration
	FailureBackoffMax  time.Duration
}

func (cfg Config) settings() *settings {
	return &settings{Epoch: cfg.Epoch, EpochMismatchDelay: cfg.EpochMismatchDelay, FetchWait: cfg.FetchWait,
		FailureBackoff: cfg.FailureBackoff, FailureBackoffMax: cfg.FailureBackoffMax}
}

// check reports settings that are valid one by one but not together: a
// backoff above its cap. prefix is the variables', as the Lifecycle's
// resolution filled it.
func (s *settings) check(prefix string) []error {
	if s.FailureBackoff > 0 && s.FailureBackoffMax > 0 && s.FailureBackoff > s.FailureBackoffMax {
		return []error{&lameduck.ConfigError{Setting: prefix + "FAILURE_BACKOFF", Value: s.FailureBackoff.String(),
			Problem: fmt.Sprintf("above %sFAILURE_BACKOFF_MAX=%s: the first redelivery of a failed job would wait longer than the cap", prefix, s.FailureBackoffMax),
			Fix:     "lower it or raise " + prefix + "FAILURE_BACKOFF_MAX"}}
	}
	return nil
}

// durationRow is the row of a positive duration setting, stored at d,
// whose default is def; example shows the form ("5s").
func durationRow(name, field, example string, d *time.Duration, def time.Duration, doc string) extend.Row {
	return extend.Row{Name: name, Field: field, Form: `a positive Go duration with a unit, such as "` + example + `"`, Duration: d, Doc: doc,
		Default: func() string { *d = def; return "default" }}
}

// extension is what a runner adds to its Lifecycle's Config: its rows
// (EPOCH, EPOCH_MISMATCH_DELAY, FETCH_WAIT), its default rules and drain
// modes, and, with w, the worker's probe answers, its jobs in flight and
// the drain wait that holds the window until they end.
func (s *settings) extension(w *Worker) *extend.Extension {
	e := &extend.Extension{
		Rows: []extend.Row{
			{Name: "EPOCH", Field: "Epoch", Form: `a non-negative integer, such as "3"`, Uint: &s.Epoch,
				Doc: "a runner's rollout epoch, a non-negative integer; an older one than the fleet's newest is superseded ([runners](docs/runners.md#rollout-epochs))"},
			durationRow("EPOCH_MISMATCH_DELAY", "EpochMismatchDelay", "2m", &s.EpochMismatchDelay, DefaultEpochMismatchDelay,
				"how long a superseded runner delays the redelivery of a job it hands back"),
			durationRow("FETCH_WAIT", "FetchWait", "5s", &s.FetchWait, DefaultFetchWait,
				"how long a runner's fetch waits for a job; its liveness allows max(2m, 20 × it) without a cycle"),
			durationRow("FAILURE_BACKOFF", "FailureBackoff", "1s", &s.FailureBackoff, DefaultFailureBackoff,
				"how long a job whose handler failed waits before its first redelivery; each later one doubles it, up to FAILURE_BACKOFF_MAX ([runners](docs/runners.md#failures-and-backoff))"),
			durationRow("FAILURE_BACKOFF_MAX", "FailureBackoffMax", "5m", &s.FailureBackoffMax, DefaultFailureBackoffMax,
				"the longest a failed job's redelivery is delayed"),
		},
		Defaults: extend.Defaults{
			ProbeAddr: func(f extend.Fields) string {
				*f.ProbeAddr = DefaultProbeAddr
				return "default for a runner"
			},
			DrainMode: func(f extend.Fields) string {
				*f.DrainMode = DrainComplete
				return "default for a runner"
			},
			ShutdownDelay: func(f extend.Fields) string {
				*f.ShutdownDelay = lameduck.NoDelay
				return "default for a runner: no Service routes to it"
			},
			DrainTimeout:     drainTimeoutRule,
			ShutdownTeardown: teardownRule,
		},
		DrainModes: []string{DrainComplete, DrainInterrupt},
		ModesProblem: fmt.Sprintf("a runner drains in mode %q (finish the job in flight) or %q (cancel it and hand it back)",
			DrainComplete, DrainInterrupt),
		Window: grace.RunnerWindow,
		Draining: func(flip string, bound time.Duration) string {
			return fmt.Sprintf("lameduck: draining%s taking no new job; waiting for the jobs in flight (at most %s)", flip, bound)
		},
		LogAttrs: func() []any { return []any{"runner", true, "epoch", s.Epoch} },
	}
	if w != nil {
		e.Answer = func(liveness bool, phase int32) (health.Report, bool) {
			return w.answer(liveness, lameduck.Phase(phase))
		}
		e.InFlight = w.jobsInFlight
		e.Waits = []extend.Wait{{Name: "consume loops", Fn: w.drain}}
	}
	return e
}

// drainTimeoutRule chooses a runner's drain bound from its known grace
// period: what the grace leaves after the preStop sleep, the teardown and
// the margin, never below 1s (the budget line then says it does not fit).
// The teardown, when unset too, is chosen first: a third of what the grace
// leaves after the preStop sleep and the margin, at least 1s and at most
// 30s. With the grace unknown, DefaultDrainTimeout (docs/runners.md,
// "Sizing terminationGracePeriodSeconds").
func drainTimeoutRule(f extend.Fields) string {
	g := f.TerminationGrace
	if g == 0 {
		*f.DrainTimeout = DefaultDrainTimeout
		return "default for a runner whose grace period is unknown; set " + f.EnvPrefix + "TERMINATION_GRACE to derive it"
	}
	margin := grace.Margin(g)
	room := g - f.PreStopDelay - margin
	if *f.ShutdownTeardown == 0 {
		*f.ShutdownTeardown = min(defaultTeardown, max(room/3, grace.MinDefaultTeardown))
		f.Sources["SHUTDOWN_TEARDOWN"] = fmt.Sprintf("default for a runner: a third of terminationGracePeriodSeconds %s − preStop %s − margin %s, at most %s",
			g, f.PreStopDelay, margin, defaultTeardown)
	}
	d := room - *f.ShutdownTeardown
	rule := fmt.Sprintf("default for a runner: terminationGracePeriodSeconds %s − preStop %s − teardown %s − margin %s", g, f.PreStopDelay, *f.ShutdownTeardown, margin)
	if d < grace.MinDefaultTeardown {
		d, rule = grace.MinDefaultTeardown, rule+fmt.Sprintf(" = %s, raised to the %s minimum", d, grace.MinDefaultTeardown)
	}
	*f.DrainTimeout = d
	return rule
}

// teardownRule is a runner's teardown inside Kubernetes with its grace
// period unknown: 30s, since a runner's grace period is sized to its drain
// bound (hours), never Kubernetes' default. Otherwise the Lifecycle's own
// rule applies.
func teardownRule(f extend.Fields) string {
	if f.TerminationGrace != 0 || f.Env != lameduck.EnvKubernetes {
		return ""
	}
	*f.ShutdownTeardown = defaultTeardown
	return "default for a runner whose grace period is unknown; set " + f.EnvPrefix + "TERMINATION_GRACE to derive it"
}
