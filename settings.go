package lameduck

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lameduck/lameduck/health"
)

// ConfigError is one refused setting. Every error that [New] and [Resolve]
// return for a bad setting is a *ConfigError; it wraps [ErrInvalidConfig].
// Its text names the setting, the value, what is wrong and the fix:
//
//	lameduck: LAMEDUCK_SHUTDOWN_DELAY="5": a duration needs a unit (write 5s or 5ms); set it to a Go duration with a unit, such as "5s", or unset it: invalid configuration
type ConfigError struct {
	// Setting is what was refused: an environment variable with its prefix
	// ("LAMEDUCK_SHUTDOWN_DELAY") or a Config field ("Config.ShutdownDelay").
	Setting string
	// Value is the refused value: the variable's text, or the field's value
	// formatted with %v.
	Value string
	// Problem says what is wrong with the value.
	Problem string
	// Fix says what to do: the accepted form, or which setting to change.
	Fix string
}

func (e *ConfigError) Error() string {
	v := e.Value
	if !strings.HasPrefix(e.Setting, "Config.") {
		v = strconv.Quote(v)
	}
	return fmt.Sprintf("lameduck: %s=%s: %s; %s: %v", e.Setting, v, e.Problem, e.Fix, ErrInvalidConfig)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// setting is one row of the configuration table: one environment variable
// (its name after the prefix), the Config field it fills, the accepted form
// shown with every refusal, and how a value is read and checked. The
// resolver walks the table, so a new setting is a new row, and [Resolve]
// hands lameduck vet the very same rows.
type setting struct {
	name  string // after the prefix, such as "SHUTDOWN_DELAY"
	field string // the Config field, such as "ShutdownDelay"
	form  string // the accepted form, such as `a Go duration with a unit, such as "5s"`
	// unset reports whether the code left the field at its zero value.
	unset func(c *Config) bool
	// load parses the variable's text into the field and returns "", or
	// returns why the text is refused and leaves the field alone.
	load func(c *Config, v string) (why string)
	// check returns why a value the code set is refused, or "". It may
	// normalise the value (the case of an enum).
	check func(c *Config) (why string)
	// show formats the field's value, for an error about the code's value.
	show func(c *Config) string
	// reset sets the field back to its zero value after a refusal.
	reset func(c *Config)
}

// settingTable returns the configuration table, in the order New reads and
// reports it.
func settingTable() []setting {
	return []setting{
		enumSetting("ENV", "Env", "", func(c *Config) *string { return &c.Env }, EnvKubernetes, EnvLocal),
		durationSetting("SHUTDOWN_DELAY", "ShutdownDelay", `a Go duration with a unit, such as "5s" ("0s" for no window)`,
			delayDuration, func(c *Config) *time.Duration { return &c.ShutdownDelay }),
		durationSetting("SHUTDOWN_TEARDOWN", "ShutdownTeardown", `a positive Go duration with a unit, such as "30s" (a zero teardown would cut every in-flight request at once)`,
			positiveDuration, func(c *Config) *time.Duration { return &c.ShutdownTeardown }),
		durationSetting("TERMINATION_GRACE", "TerminationGrace", `the pod's terminationGracePeriodSeconds as a Go duration with a unit, such as "60s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.TerminationGrace }),
		durationSetting("PRESTOP_DELAY", "PreStopDelay", `the pod's preStop sleep as a Go duration with a unit, such as "5s"`,
			nonNegativeDuration, func(c *Config) *time.Duration { return &c.PreStopDelay }),
		boolSetting("PRESTOP", "PreStop", func(c *Config) *bool { return &c.PreStop }),
		secretSetting(stringSetting("PRESTOP_TOKEN", "PreStopToken", "a secret of printable ASCII, also set in the preStop hook's httpHeaders", func(c *Config) *string { return &c.PreStopToken })),
		stringSetting("PRESTOP_TOKEN_FILE", "PreStopTokenFile", "the path of a readable, non-empty file holding the token, such as a mounted Secret", func(c *Config) *string { return &c.PreStopTokenFile }),
		enumSetting("CHECK_DETAILS", "CheckDetails", "", func(c *Config) *string { return &c.CheckDetails }, CheckDetailsAuto, CheckDetailsShow, CheckDetailsHide),
		livenessPathsSetting(),
		pathSetting("READINESS_PATH", "ReadinessPath", PathReadiness, func(c *Config) *string { return &c.ReadinessPath }),
		pathSetting("STARTUP_PATH", "StartupPath", PathStartup, func(c *Config) *string { return &c.StartupPath }),
		pathSetting("PRESTOP_PATH", "PreStopPath", PathPreStop, func(c *Config) *string { return &c.PreStopPath }),
		boolSetting("EXIT_ON_SECOND_SIGNAL", "ExitOnSecondSignal", func(c *Config) *bool { return &c.ExitOnSecondSignal }),
		stringSetting("PROBE_ADDR", "ProbeAddr", `a listen address such as ":9090"`, func(c *Config) *string { return &c.ProbeAddr }),
		enumSetting("DRAIN_MODE", "DrainMode", `"delay" or "idle" ("complete" or "interrupt" for a runner)`, func(c *Config) *string { return &c.DrainMode }, DrainDelay, DrainIdle, DrainComplete, DrainInterrupt),
		durationSetting("IDLE_WINDOW", "IdleWindow", `a positive Go duration with a unit, such as "10s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.IdleWindow }),
		durationSetting("DRAIN_TIMEOUT", "DrainTimeout", `a positive Go duration with a unit at least the shutdown delay, such as "30s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.DrainTimeout }),
		boolSetting("SEND_RETRY_AFTER", "SendRetryAfter", func(c *Config) *bool { return &c.SendRetryAfter }),
		durationSetting("CHECK_TIMEOUT", "CheckTimeout", `a positive Go duration with a unit, such as "1s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.CheckTimeout }),
		durationSetting("CHECK_MAX_AGE", "CheckMaxAge", `a Go duration with a unit, such as "1s", or "0s" to ping on every probe`,
			nonNegativeDuration, func(c *Config) *time.Duration { return &c.CheckMaxAge }),
		durationSetting("JOIN_BUDGET", "JoinBudget", `a positive Go duration with a unit below the teardown budget, such as "5s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.JoinBudget }),
		fractionSetting("HOOK_SHARE", "HookShare", func(c *Config) *float64 { return &c.HookShare }),
		uintSetting("EPOCH", "Epoch", `a non-negative integer, such as "3"`, func(c *Config) *uint64 { return &c.Epoch }),
		durationSetting("EPOCH_MISMATCH_DELAY", "EpochMismatchDelay", `a positive Go duration with a unit, such as "2m"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.EpochMismatchDelay }),
		durationSetting("FETCH_WAIT", "FetchWait", `a positive Go duration with a unit, such as "5s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.FetchWait }),
		durationSetting("STARTUP_TIMEOUT", "StartupTimeout", `a positive Go duration with a unit below the startup probe's failureThreshold × periodSeconds, such as "2m"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.StartupTimeout }),
	}
}

// durationKind says which durations a setting accepts.
type durationKind int

const (
	positiveDuration    durationKind = iota // zero and negative are refused
	nonNegativeDuration                     // zero is accepted (and equals unset)
	delayDuration                           // zero from the environment means NoDelay; negative is refused
)

func durationSetting(name, field, form string, kind durationKind, p func(*Config) *time.Duration) setting {
	return setting{
		name: name, field: field, form: form,
		unset: func(c *Config) bool { return *p(c) == 0 },
		load: func(c *Config, v string) string {
			d, err := parseDuration(v)
			switch {
			case err != nil:
				return err.Error()
			case d < 0:
				return "must not be negative"
			case d == 0 && kind == positiveDuration:
				return "must be greater than zero"
			case d == 0 && kind == delayDuration:
				d = NoDelay
			}
			*p(c) = d
			return ""
		},
		check: func(c *Config) string {
			switch d := *p(c); {
			case d >= 0, kind == delayDuration && d == NoDelay:
				return ""
			case kind == delayDuration:
				return "must not be negative; use lameduck.NoDelay for a zero window"
			case kind == positiveDuration:
				return "must be positive"
			default:
				return "must not be negative"
			}
		},
		show:  func(c *Config) string { return p(c).String() },
		reset: func(c *Config) { *p(c) = 0 },
	}
}

func boolSetting(name, field string, p func(*Config) *bool) setting {
	return setting{
		name: name, field: field, form: `"true" or "false"`,
		unset: func(c *Config) bool { return !*p(c) },
		load: func(c *Config, v string) string {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "not a boolean"
			}
			*p(c) = b
			return ""
		},
		check: func(*Config) string { return "" },
		show:  func(c *Config) string { return strconv.FormatBool(*p(c)) },
		reset: func(c *Config) { *p(c) = false },
	}
}

func stringSetting(name, field, form string, p func(*Config) *string) setting {
	return setting{
		name: name, field: field, form: form,
		unset: func(c *Config) bool { return *p(c) == "" },
		load:  func(c *Config, v string) string { *p(c) = v; return "" },
		check: func(*Config) string { return "" },
		show:  func(c *Config) string { return *p(c) },
		reset: func(c *Config) { *p(c) = "" },
	}
}

func uintSetting(name, field, form string, p func(*Config) *uint64) setting {
	return setting{
		name: name, field: field, form: form,
		unset: func(c *Config) bool { return *p(c) == 0 },
		load: func(c *Config, v string) string {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return "not a non-negative integer"
			}
			*p(c) = n
			return ""
		},
		check: func(*Config) string { return "" },
		show:  func(c *Config) string { return strconv.FormatUint(*p(c), 10) },
		reset: func(c *Config) { *p(c) = 0 },
	}
}

// enumSetting accepts one of values in any case, as strconv.ParseBool
// accepts "TRUE", and stores it in lower case. An empty form lists values.
func enumSetting(name, field, form string, p func(*Config) *string, values ...string) setting {
	if form == "" {
		quoted := make([]string, len(values))
		for i, v := range values {
			quoted[i] = strconv.Quote(v)
		}
		form = strings.Join(quoted, " or ")
	}
	pick := func(c *Config, v string) string {
		if i := slices.Index(values, strings.ToLower(v)); i >= 0 {
			*p(c) = values[i]
			return ""
		}
		return "not one of the choices"
	}
	return setting{
		name: name, field: field, form: form,
		unset: func(c *Config) bool { return *p(c) == "" },
		load:  pick,
		check: func(c *Config) string { return pick(c, *p(c)) },
		show:  func(c *Config) string { return *p(c) },
		reset: func(c *Config) { *p(c) = "" },
	}
}

// fractionSetting accepts a number strictly between 0 and 1.
func fractionSetting(name, field string, p func(*Config) *float64) setting {
	const why = "must be between 0 and 1, exclusive"
	return setting{
		name: name, field: field, form: `a fraction between 0 and 1, such as "0.66"`,
		unset: func(c *Config) bool { return *p(c) == 0 },
		load: func(c *Config, v string) string {
			f, err := strconv.ParseFloat(v, 64)
			switch {
			case err != nil:
				return "not a number"
			case !(f > 0 && f < 1): // NaN and ±Inf too
				return why
			}
			*p(c) = f
			return ""
		},
		check: func(c *Config) string {
			if f := *p(c); !(f > 0 && f < 1) {
				return why
			}
			return ""
		},
		show:  func(c *Config) string { return strconv.FormatFloat(*p(c), 'g', -1, 64) },
		reset: func(c *Config) { *p(c) = 0 },
	}
}

// Defaults of the settings that have a fixed one; the teardown's and the
// window's depend on where the process runs (see resolve).
const (
	defaultKubernetesDelay = 5 * time.Second
	defaultLocalTeardown   = 60 * time.Second
	defaultRunnerTeardown  = 30 * time.Second
	defaultIdleWindow      = 10 * time.Second
	defaultDrainTimeout    = 30 * time.Second
	defaultHookShare       = 2.0 / 3
	// minDefaultTeardown is the least teardown a default derived from the
	// grace period gives: a zero budget would cut every request at once.
	minDefaultTeardown = time.Second
)

// resolve fills every unset field of c from the environment and the
// defaults, records the rule that chose each setting's value, and checks
// the result. It returns every problem, one *ConfigError each, in table
// order and then the checks across settings; a refused value is treated as
// unset, so the rest is still resolved.
func (c Config) resolve() (Config, map[string]string, []error) {
	if c.EnvPrefix == "" {
		c.EnvPrefix = DefaultEnvPrefix
	}
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
		if c.Environ == nil {
			c.Environ = os.Environ
		}
	}
	if c.Logger == nil {
		c.Logger = defaultLogger() // slog.Default() at the time of each line
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if len(c.Signals) == 0 {
		c.Signals = defaultSignals()
	}
	if c.Version == "" || c.Commit == "" {
		v, cm := health.BuildInfo()
		if c.Version == "" {
			c.Version = v
		}
		if c.Commit == "" {
			c.Commit = cm
		}
	}

	table := settingTable()
	src := map[string]string{}
	var errs []error

	// Unknown variables with our prefix: a typo must not be silently lost.
	// Only with lameduck's own prefix: an application that chose its own
	// shares it with its own variables.
	if c.Environ != nil && c.EnvPrefix == DefaultEnvPrefix {
		for _, kv := range c.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			name, ok := strings.CutPrefix(k, c.EnvPrefix)
			if !ok || slices.ContainsFunc(table, func(s setting) bool { return s.name == name }) {
				continue
			}
			if isServiceLink(k, v, c.LookupEnv) {
				continue // a Service's link variable, injected by the kubelet (servicelinks.go)
			}
			known := make([]string, len(table))
			for i, s := range table {
				known[i] = c.EnvPrefix + s.name
			}
			errs = append(errs, &ConfigError{Setting: k, Value: v, Problem: "not a lameduck setting",
				Fix: "fix the spelling or unset it (variables of your own need another prefix); known: " + strings.Join(known, ", ")})
		}
	}

	for _, s := range table {
		if !s.unset(&c) {
			if why := s.check(&c); why != "" {
				errs = append(errs, &ConfigError{Setting: "Config." + s.field, Value: s.show(&c), Problem: why,
					Fix: "set it to " + s.form + ", or leave it zero for the default"})
				s.reset(&c)
				continue
			}
			src[s.name] = "Config." + s.field
			continue
		}
		v, ok := c.LookupEnv(c.EnvPrefix + s.name)
		if v = strings.TrimSpace(v); !ok || v == "" {
			continue // an empty variable means unset
		}
		if why := s.load(&c, v); why != "" {
			errs = append(errs, &ConfigError{Setting: c.EnvPrefix + s.name, Value: v, Problem: why,
				Fix: "set it to " + s.form + ", or unset it"})
			continue
		}
		src[s.name] = c.EnvPrefix + s.name
	}

	errs = append(errs, c.readTokenFile(src)...)

	// The defaults, each with the rule that chose it.
	if c.PreStopToken != "" && !c.PreStop {
		c.PreStop = true
		src["PRESTOP"] = c.EnvPrefix + "PRESTOP_TOKEN is set"
	}
	if c.Env == "" {
		if v, _ := c.LookupEnv("KUBERNETES_SERVICE_HOST"); v != "" {
			c.Env, src["ENV"] = EnvKubernetes, "KUBERNETES_SERVICE_HOST is set"
		} else {
			c.Env, src["ENV"] = EnvLocal, "KUBERNETES_SERVICE_HOST is not set"
		}
	}
	// A runner drains in its own modes; a server in its own.
	switch server := c.DrainMode == DrainDelay || c.DrainMode == DrainIdle; {
	case c.DrainMode == "" && c.Runner:
		c.DrainMode, src["DRAIN_MODE"] = DrainComplete, "default for a runner"
	case c.DrainMode == "":
		c.DrainMode, src["DRAIN_MODE"] = DrainDelay, "default"
	case c.Runner && server, !c.Runner && !server:
		want := fmt.Sprintf("a server drains in mode %q (a fixed window) or %q (until traffic is idle)", DrainDelay, DrainIdle)
		if c.Runner {
			want = fmt.Sprintf("a runner drains in mode %q (finish the job in flight) or %q (cancel it and hand it back)", DrainComplete, DrainInterrupt)
		}
		errs = append(errs, &ConfigError{Setting: named(&c, src, "DRAIN_MODE"), Value: c.DrainMode, Problem: want,
			Fix: "set one of them, or unset it"})
		c.DrainMode, src["DRAIN_MODE"] = DrainDelay, "default"
		if c.Runner {
			c.DrainMode, src["DRAIN_MODE"] = DrainComplete, "default for a runner"
		}
	}
	if c.ShutdownDelay == 0 {
		switch {
		case c.Runner:
			c.ShutdownDelay, src["SHUTDOWN_DELAY"] = NoDelay, "default for a runner: no Service routes to it"
		case c.Env == EnvKubernetes:
			c.ShutdownDelay, src["SHUTDOWN_DELAY"] = defaultKubernetesDelay, "default in Kubernetes"
		default:
			c.ShutdownDelay, src["SHUTDOWN_DELAY"] = NoDelay, "default outside Kubernetes: Ctrl-C stops now"
		}
	}
	if c.IdleWindow == 0 {
		c.IdleWindow, src["IDLE_WINDOW"] = defaultIdleWindow, "default"
	}
	if c.DrainTimeout == 0 {
		switch {
		case c.Runner && c.TerminationGrace > 0:
			runnerDrainDefault(&c, src)
		case c.Runner:
			c.DrainTimeout, src["DRAIN_TIMEOUT"] = DefaultRunnerDrainTimeout, "default for a runner whose grace period is unknown; set "+c.EnvPrefix+"TERMINATION_GRACE to derive it"
		default:
			c.DrainTimeout, src["DRAIN_TIMEOUT"] = defaultDrainTimeout, "default"
		}
	}
	if c.EpochMismatchDelay == 0 {
		c.EpochMismatchDelay, src["EPOCH_MISMATCH_DELAY"] = DefaultEpochMismatchDelay, "default"
	}
	if c.FetchWait == 0 {
		c.FetchWait, src["FETCH_WAIT"] = DefaultFetchWait, "default"
	}
	if c.Runner && c.ProbeAddr == "" {
		c.ProbeAddr, src["PROBE_ADDR"] = DefaultRunnerProbeAddr, "default for a runner"
	}
	errs = append(errs, c.checkProbes(src)...)
	if c.CheckTimeout == 0 {
		c.CheckTimeout, src["CHECK_TIMEOUT"] = health.DefaultCheckTimeout, "default"
	}
	if c.HookShare == 0 {
		c.HookShare, src["HOOK_SHARE"] = defaultHookShare, "default"
	}
	if c.ShutdownTeardown == 0 {
		c.ShutdownTeardown, src["SHUTDOWN_TEARDOWN"] = defaultTeardown(&c)
	}
	if c.JoinBudget == 0 {
		src["JOIN_BUDGET"] = "default: no cap, the join may use whatever the teardown has left"
	}
	if c.StartupTimeout == 0 {
		src["STARTUP_TIMEOUT"] = "default: no bound"
	}

	// Checks across settings.
	if c.DrainMode == DrainIdle && c.DrainTimeout < c.window() {
		errs = append(errs, &ConfigError{Setting: named(&c, src, "DRAIN_TIMEOUT"), Value: c.DrainTimeout.String(),
			Problem: fmt.Sprintf("shorter than %s=%s, the idle drain's minimum", named(&c, src, "SHUTDOWN_DELAY"), c.window()),
			Fix:     "raise it to at least " + c.window().String()})
	}
	if c.JoinBudget >= c.ShutdownTeardown {
		errs = append(errs, &ConfigError{Setting: named(&c, src, "JOIN_BUDGET"), Value: c.JoinBudget.String(),
			Problem: fmt.Sprintf("must be less than the teardown budget %s, which it is spent inside", c.ShutdownTeardown),
			Fix:     fmt.Sprintf("lower it, unset it (the join then uses whatever the teardown has left), or raise %sSHUTDOWN_TEARDOWN", c.EnvPrefix)})
		c.JoinBudget = 0
	}
	return c, src, errs
}

// named returns a setting as the operator wrote it: the Config field or the
// variable that set it, or the variable that would set it.
func named(c *Config, src map[string]string, name string) string {
	if s := src[name]; strings.HasPrefix(s, "Config.") || s == c.EnvPrefix+name {
		return s
	}
	return c.EnvPrefix + name
}

// runnerDrainDefault chooses a runner's drain bound, unset, from its known
// grace period: what the grace leaves after the preStop sleep, the
// teardown and the margin, never below 1s (the budget line then says it
// does not fit). The teardown, when unset too, is chosen first: a third of
// what the grace leaves after the preStop sleep and the margin, at least 1s
// and at most the 30s a runner's teardown defaults to without a grace
// period (docs/runners.md, "Sizing").
func runnerDrainDefault(c *Config, src map[string]string) {
	grace, margin := c.TerminationGrace, graceMargin(c.TerminationGrace)
	room := grace - c.PreStopDelay - margin
	if c.ShutdownTeardown == 0 {
		c.ShutdownTeardown = min(defaultRunnerTeardown, max(room/3, minDefaultTeardown))
		src["SHUTDOWN_TEARDOWN"] = fmt.Sprintf("default for a runner: a third of terminationGracePeriodSeconds %s − preStop %s − margin %s, at most %s",
			grace, c.PreStopDelay, margin, defaultRunnerTeardown)
	}
	d := room - c.ShutdownTeardown
	rule := fmt.Sprintf("default for a runner: terminationGracePeriodSeconds %s − preStop %s − teardown %s − margin %s", grace, c.PreStopDelay, c.ShutdownTeardown, margin)
	if d < minDefaultTeardown {
		d, rule = minDefaultTeardown, rule+fmt.Sprintf(" = %s, raised to the %s minimum", d, minDefaultTeardown)
	}
	c.DrainTimeout, src["DRAIN_TIMEOUT"] = d, rule
}

// defaultTeardown chooses the teardown budget the code and the environment
// left unset, and says which rule chose it. With a known grace period, or
// inside Kubernetes (whose default terminationGracePeriodSeconds is 30s),
// it is what the grace period leaves after the preStop sleep, the longest
// window and a margin, never below 1s; elsewhere 60s.
func defaultTeardown(c *Config) (time.Duration, string) {
	grace, whose := c.TerminationGrace, "terminationGracePeriodSeconds"
	if grace == 0 {
		switch {
		case c.Env != EnvKubernetes:
			return defaultLocalTeardown, "default outside Kubernetes"
		case c.Runner:
			// A runner's grace period is sized to its drain bound (hours),
			// never Kubernetes' default (docs/runners.md, "Sizing").
			return defaultRunnerTeardown, "default for a runner whose grace period is unknown; set " + c.EnvPrefix + "TERMINATION_GRACE to derive it"
		}
		grace, whose = DefaultTerminationGrace, "Kubernetes' default terminationGracePeriodSeconds"
	}
	margin := graceMargin(grace)
	d := grace - c.PreStopDelay - c.maxWindow() - margin
	rule := fmt.Sprintf("default: %s %s − preStop %s − window %s − margin %s", whose, grace, c.PreStopDelay, c.maxWindow(), margin)
	if d < minDefaultTeardown {
		return minDefaultTeardown, rule + fmt.Sprintf(" = %s, raised to the %s minimum", d, minDefaultTeardown)
	}
	return d, rule
}

// graceMargin is the part of the grace period a default teardown leaves
// unused, for the process to exit after Run returns and for the kubelet's
// own delays: a tenth of the grace period, at least 2s and at most 10s.
func graceMargin(grace time.Duration) time.Duration {
	return min(max(grace/10, 2*time.Second), 10*time.Second)
}

// parseDuration is time.ParseDuration with the errors an operator can act on.
func parseDuration(v string) (time.Duration, error) {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return 0, fmt.Errorf("a duration needs a unit (write %ss or %sms)", v, v)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("not a Go duration")
	}
	return d, nil
}
