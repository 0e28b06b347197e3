package lameduck

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lameduck/lameduck/health"
)

// ConfigError is one refused setting. Every error that [New] and [Resolve]
// return for a bad setting is a *ConfigError, whether the setting came from
// a Config field or an environment variable: errors.As finds the first in
// New's joined error, so a caller can tell a bad configuration (exit 2, say)
// from a failure to run. Its text names the setting, the value, what is
// wrong and the fix:
//
//	lameduck: LAMEDUCK_SHUTDOWN_DELAY="5": a duration needs a unit (write 5s or 5ms); set it to a Go duration with a unit, such as "5s", or unset it: invalid configuration
type ConfigError struct {
	// Setting is what was refused: an environment variable with its prefix
	// ("LAMEDUCK_SHUTDOWN_DELAY") or a Config field ("Config.ShutdownDelay";
	// a runner's own, "worker.Config.EpochPoll").
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
	if !strings.Contains(e.Setting, "Config.") { // a variable's text: quoted
		v = strconv.Quote(v)
	}
	return fmt.Sprintf("lameduck: %s=%s: %s; %s: invalid configuration", e.Setting, v, e.Problem, e.Fix)
}

// setting is one row of the configuration table: one environment variable
// (its name after the prefix), the Config field it fills, the accepted form
// shown with every refusal, its one-line doc, how a value is read and
// checked, and the rule that chooses its default. The resolver walks the
// table, so a new setting is a new row, and [Resolve] hands lameduck vet
// the very same rows.
type setting struct {
	name  string // after the prefix, such as "SHUTDOWN_DELAY"
	field string // the Config field, such as "ShutdownDelay"
	form  string // the accepted form, such as `a Go duration with a unit, such as "5s"`
	// doc says in one line of Markdown what the setting does: the
	// "meaning" column of README.md's configuration table, which
	// TestSettingsTablesMatchTheRows holds to it.
	doc string
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
	// byDefault, when neither the code nor the environment set the field,
	// chooses its default (see defaultRule). Nil: the setting stays unset.
	byDefault defaultRule
	// after, when set, names a row below this one whose default this
	// row's rule reads: its default is chosen right after that row's.
	after string
}

// with returns s with its doc and its default rule.
func (s setting) with(doc string, rule defaultRule) setting {
	s.doc, s.byDefault = doc, rule
	return s
}

// chosenAfter returns s with its default chosen right after row name's.
func (s setting) chosenAfter(name string) setting {
	s.after = name
	return s
}

// settingTable returns the configuration table, in the order New reads and
// reports it and chooses the defaults: a row's default rule may read the
// rows above it, and a row marked chosenAfter the row it names (the
// teardown's default reads the window's).
func settingTable() []setting {
	return []setting{
		enumSetting("ENV", "Env", "", func(c *Config) *string { return &c.Env }, EnvKubernetes, EnvLocal).
			with("`kubernetes` or `local` (any case); picks the defaults below", defaultEnv),
		durationSetting("SHUTDOWN_DELAY", "ShutdownDelay", `a Go duration with a unit, such as "5s" ("0s" for no window)`,
			delayDuration, func(c *Config) *time.Duration { return &c.ShutdownDelay }).
			with("the lame-duck window: serve normally before teardown, `/readyz` 503 or 200 `draining` (`LAMEDUCK_NOT_READY_AT`). `0s` still flips readiness; negative is an error", defaultShutdownDelay),
		durationSetting("SHUTDOWN_TEARDOWN", "ShutdownTeardown", `a positive Go duration with a unit, such as "30s" (a zero teardown would cut every in-flight request at once)`,
			positiveDuration, func(c *Config) *time.Duration { return &c.ShutdownTeardown }).
			with("budget for in-flight requests, hooks, the background join and closers after the window; then the rest is cut, named in the log, exit 1. Must be > 0", defaultTeardown).
			chosenAfter("DRAIN_TIMEOUT"),
		durationSetting("TERMINATION_GRACE", "TerminationGrace", `the pod's terminationGracePeriodSeconds as a Go duration with a unit, such as "60s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.TerminationGrace }).
			with("the pod's `terminationGracePeriodSeconds` as a duration (`60s`); the teardown's default is derived from it, and startup logs preStop + window + teardown against it and warns when it does not fit (unset in Kubernetes: Kubernetes' default 30s is assumed)", nil),
		durationSetting("PRESTOP_DELAY", "PreStopDelay", `the pod's preStop sleep as a Go duration with a unit, such as "5s"`,
			nonNegativeDuration, func(c *Config) *time.Duration { return &c.PreStopDelay }).
			with("the length of a preStop `sleep` hook, which runs before SIGTERM and counts against the grace period; used only in that arithmetic", nil),
		boolSetting("PRESTOP", "PreStop", func(c *Config) *bool { return &c.PreStop }).
			with("serve `GET /prestop`: starts the drain and answers 200 when the window has passed. On the application's port it needs a token: without one (or `LAMEDUCK_PROBE_ADDR`) the process refuses to start", defaultPreStop),
		boolSetting("MAINTENANCE", "Maintenance", func(c *Config) *bool { return &c.Maintenance }).
			with("serve the maintenance switch: `POST /maintenance/on` turns `/readyz` 503 `maintenance` (nothing drains, `/healthz` stays 200), `POST /maintenance/off` brings it back. It needs the preStop token, or `LAMEDUCK_PROBE_ADDR`, as `/prestop` does", nil),
		secretSetting(stringSetting("PRESTOP_TOKEN", "PreStopToken", "a secret of printable ASCII, also set in the preStop hook's httpHeaders", func(c *Config) *string { return &c.PreStopToken })).
			with("require this value in the `X-Lameduck-Token` header of `GET /prestop` (implies `LAMEDUCK_PRESTOP=true`); printable ASCII, never logged", nil),
		stringSetting("PRESTOP_TOKEN_FILE", "PreStopTokenFile", "the path of a readable, non-empty file holding the token, such as a mounted Secret", func(c *Config) *string { return &c.PreStopTokenFile }).
			with("read the token from this file (a mounted Secret; a trailing newline is dropped); unreadable or empty is a startup error", nil),
		enumSetting("CHECK_DETAILS", "CheckDetails", "", func(c *Config) *string { return &c.CheckDetails }, CheckDetailsAuto, CheckDetailsShow, CheckDetailsHide).
			with("where readiness bodies show a failing check's error text: `auto` (on the probe-only port, not on the application's), `show`, `hide`",
				fixed(func(c *Config) { c.CheckDetails = CheckDetailsAuto }, "default: shown on the probe-only listener, hidden where the application is served")),
		livenessPathsSetting().
			with("the liveness paths (`/livez` as on the Kubernetes API server); rename them if the application owns these paths",
				fixed(func(c *Config) { c.LivenessPaths = []string{pathLiveness, pathLivez} }, "default")),
		pathSetting("READINESS_PATH", "ReadinessPath", pathReadiness, func(c *Config) *string { return &c.ReadinessPath }).
			with("the readiness path; `<path>/<check>` answers for one check. Clean, absolute, and no other probe's path",
				fixed(func(c *Config) { c.ReadinessPath = pathReadiness }, "default")),
		pathSetting("STARTUP_PATH", "StartupPath", pathStartup, func(c *Config) *string { return &c.StartupPath }).
			with("the startup probe's path; clean, absolute, and no other probe's path",
				fixed(func(c *Config) { c.StartupPath = pathStartup }, "default")),
		pathSetting("PRESTOP_PATH", "PreStopPath", pathPreStop, func(c *Config) *string { return &c.PreStopPath }).
			with("the preStop hook's path; clean, absolute, and no other probe's path",
				fixed(func(c *Config) { c.PreStopPath = pathPreStop }, "default")),
		boolSetting("EXIT_ON_SECOND_SIGNAL", "ExitOnSecondSignal", func(c *Config) *bool { return &c.ExitOnSecondSignal }).
			with("a second SIGTERM/SIGINT exits at once with 128 + the signal number", nil),
		stringSetting("PROBE_ADDR", "ProbeAddr", `a listen address such as ":9090"`, func(c *Config) *string { return &c.ProbeAddr }).
			with("serve the probes on their own listener instead of the application's", nil),
		drainModeSetting(),
		durationSetting("IDLE_WINDOW", "IdleWindow", `a positive Go duration with a unit, such as "10s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.IdleWindow }).
			with("idle mode: how long nothing may be in flight and no request arrive or complete (WebSockets count only through `KeepAlive`)",
				fixed(func(c *Config) { c.IdleWindow = defaultIdleWindow }, "default")),
		durationSetting("DRAIN_TIMEOUT", "DrainTimeout", `a positive Go duration with a unit at least the shutdown delay, such as "30s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.DrainTimeout }).
			with("idle mode: the longest the window may last after the signal; must be ≥ `SHUTDOWN_DELAY`. A runner: the bound on the job in flight, which is then cancelled, named with its age and handed back, and the process exits 1",
				fixed(func(c *Config) { c.DrainTimeout = defaultDrainTimeout }, "default")),
		durationSetting("MAX_CONNECTION_AGE", "MaxConnectionAge", `a Go duration with a unit, such as "10m" ("0s" for no limit)`,
			nonNegativeDuration, func(c *Config) *time.Duration { return &c.MaxConnectionAge }).
			with("close a client connection once it is this old (±10%): the next response carries `Connection: close` (HTTP/2: GOAWAY), so long-lived connections spread over new pods after a rollout. `0s` is off; negative is an error", nil),
		boolSetting("SEND_RETRY_AFTER", "SendRetryAfter", func(c *Config) *bool { return &c.SendRetryAfter }).
			with("during teardown keep the listener open and answer new requests 503 with `Retry-After: 1`, for load balancers that ignore readiness", nil),
		enumSetting("NOT_READY_AT", "NotReadyAt", "", func(c *Config) *string { return &c.NotReadyAt }, NotReadyAtSignal, NotReadyAtTeardown).
			with("when `/readyz` turns 503 in the shutdown sequence: `teardown` (200 `draining` through the window, so a Service's last endpoint keeps kube-proxy's fallback to terminating endpoints; the default in Kubernetes) or `signal` (for the whole window; the default elsewhere); [which to choose](docs/probes-and-shutdown.md#when-readiness-turns-503)",
				defaultNotReadyAt),
		durationSetting("CHECK_TIMEOUT", "CheckTimeout", `a positive Go duration with a unit, such as "1s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.CheckTimeout }).
			with("the deadline of every readiness check that sets none of its own",
				fixed(func(c *Config) { c.CheckTimeout = health.DefaultCheckTimeout }, "default")),
		durationSetting("CHECK_MAX_AGE", "CheckMaxAge", `a Go duration with a unit, such as "1s", or "0s" to ping on every probe`,
			nonNegativeDuration, func(c *Config) *time.Duration { return &c.CheckMaxAge }).
			with("how old a check's last result may be and still answer a probe (one ping per check per `MaxAge`, whatever the number of probers; [why](docs/probes-and-shutdown.md#a-ping-budget-per-dependency)); `0s` pings on every probe", nil),
		durationSetting("JOIN_BUDGET", "JoinBudget", `a positive Go duration with a unit below the teardown budget, such as "5s"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.JoinBudget }).
			with("an optional cap on the background join (`GoWrite`, `GoLoop`); by default the join may use whatever the teardown has left. Work still running at the bound is named once, with the setting that widens it, and the process exits 1",
				fixed(func(*Config) {}, "default: no cap, the join may use whatever the teardown has left")),
		fractionSetting("HOOK_SHARE", "HookShare", func(c *Config) *float64 { return &c.HookShare }).
			with("the largest fraction of the teardown its hooks (`AddTeardownHook`) may use; they run beside the HTTP drain",
				fixed(func(c *Config) { c.HookShare = defaultHookShare }, "default")),
		durationSetting("STARTUP_TIMEOUT", "StartupTimeout", `a positive Go duration with a unit below the startup probe's failureThreshold × periodSeconds, such as "2m"`,
			positiveDuration, func(c *Config) *time.Duration { return &c.StartupTimeout }).
			with("the boot's budget (startup tasks, retries included); size it below the startup probe's `failureThreshold × periodSeconds`",
				fixed(func(*Config) {}, "default: no bound")),
	}
}

// drainModeSetting is the row of DRAIN_MODE: a server's modes, and an
// extension's (a runner's) besides.
func drainModeSetting(extra ...string) setting {
	return enumSetting("DRAIN_MODE", "DrainMode", `"delay" or "idle" ("complete" or "interrupt" for a runner)`, func(c *Config) *string { return &c.DrainMode }, append([]string{DrainDelay, DrainIdle}, extra...)...).
		with("any case. `delay`: the window is `SHUTDOWN_DELAY`. `idle`: keep serving until traffic stops for `IDLE_WINDOW`, at least `SHUTDOWN_DELAY`, at most `DRAIN_TIMEOUT`. A runner: `complete` finishes the job in flight, `interrupt` cancels it and hands it back",
			fixed(func(c *Config) { c.DrainMode = DrainDelay }, "default"))
}

// rows returns the table c is resolved by: settingTable, with what an
// extension attached to c adds (its drain modes, its own rows last).
func (c *Config) rows() []setting {
	table := settingTable()
	if c.Extension == nil {
		return table
	}
	for i := range table {
		if table[i].name == "DRAIN_MODE" {
			table[i] = drainModeSetting(c.Extension.DrainModes...)
		}
	}
	for _, r := range c.Extension.Rows {
		var s setting
		switch {
		case r.Duration != nil:
			s = durationSetting(r.Name, r.Field, r.Form, positiveDuration, func(*Config) *time.Duration { return r.Duration })
		case r.Uint != nil:
			s = uintSetting(r.Name, r.Field, r.Form, func(*Config) *uint64 { return r.Uint })
		default:
			continue
		}
		s.doc = r.Doc
		if r.Default != nil {
			s.byDefault = func(*Config, map[string]string) string { return r.Default() }
		}
		table = append(table, s)
	}
	return table
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
