package lameduck

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/extend"
	"github.com/lameduck/lameduck/internal/grace"
)

// Defaults of the settings that have a fixed one; the teardown's and the
// window's depend on where the process runs (see the rules below).
const (
	defaultKubernetesDelay = 5 * time.Second
	defaultLocalTeardown   = 60 * time.Second
	defaultIdleWindow      = 10 * time.Second
	defaultDrainTimeout    = 30 * time.Second
	defaultHookShare       = 2.0 / 3
	// minDefaultTeardown is the least teardown a default derived from the
	// grace period gives: a zero budget would cut every request at once.
	minDefaultTeardown = grace.MinDefaultTeardown
)

// resolve fills every unset field of c from the environment and the
// defaults, records the rule that chose each setting's value, and checks
// the result, in four steps:
//
//  1. every row of the table, in order: the code's value is checked, or
//     else the variable is read (unknown LAMEDUCK_ variables are refused
//     first);
//  2. the preStop token file is read (it fills PRESTOP_TOKEN);
//  3. every row still unset gets its default, in table order (see
//     chosenAfter), by the row's rule (an extension's first: a runner's);
//  4. the checks across settings (crossChecks), in the order of the
//     shutdown timeline.
//
// It returns every problem, one *ConfigError each, in that order; a
// refused value is treated as unset, so the rest is still resolved.
func (c Config) resolve() (Config, map[string]string, []error) {
	c.fillPlumbing()
	table := c.rows()
	src := map[string]string{}
	errs := c.unknownVariables(table)
	errs = append(errs, c.readRows(table, src)...)
	errs = append(errs, c.readTokenFile(src)...)
	c.chooseDefaults(table, src)
	for _, check := range crossChecks {
		errs = append(errs, check(&c, src)...)
	}
	return c, src, errs
}

// fillPlumbing fills the fields no variable sets: the prefix, the
// environment's readers, the logger, the clock, the build.
func (c *Config) fillPlumbing() {
	if c.EnvPrefix == "" {
		c.EnvPrefix = defaultEnvPrefix
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
	if c.Version == "" || c.Commit == "" {
		v, cm := health.BuildInfo()
		if c.Version == "" {
			c.Version = v
		}
		if c.Commit == "" {
			c.Commit = cm
		}
	}
}

// unknownVariables refuses the variables with our prefix that name no
// setting: a typo must not be silently lost. Only with lameduck's own
// prefix: an application that chose its own shares it with its own
// variables.
func (c *Config) unknownVariables(table []setting) []error {
	if c.Environ == nil || c.EnvPrefix != defaultEnvPrefix {
		return nil
	}
	var errs []error
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, c.EnvPrefix)
		if !ok || slices.ContainsFunc(table, func(s setting) bool { return s.name == name }) {
			continue
		}
		if isServiceLink(k, v, c.LookupEnv) {
			continue // a Service's link variable, injected by the kubelet (servicelinks.go)
		}
		if slices.Contains(extend.RunnerSettings(), name) {
			errs = append(errs, &ConfigError{Setting: k, Value: v,
				Problem: "a runner's setting (package worker, docs/runners.md): this process is not a runner, so it would do nothing",
				Fix:     "unset it for this container; set it only where a worker.Worker runs"})
			continue
		}
		known := make([]string, len(table))
		for i, s := range table {
			known[i] = c.EnvPrefix + s.name
		}
		errs = append(errs, &ConfigError{Setting: k, Value: v, Problem: "not a lameduck setting",
			Fix: "fix the spelling or unset it (variables of your own need another prefix); known: " + strings.Join(known, ", ")})
	}
	return errs
}

// readRows walks the table: a value the code set is checked (and reset
// when refused); an unset one is read from its variable, where an empty
// value means unset.
func (c *Config) readRows(table []setting, src map[string]string) []error {
	var errs []error
	for _, s := range table {
		if !s.unset(c) {
			if why := s.check(c); why != "" {
				errs = append(errs, &ConfigError{Setting: "Config." + s.field, Value: s.show(c), Problem: why,
					Fix: "set it to " + s.form + ", or leave it zero for the default"})
				s.reset(c)
				continue
			}
			src[s.name] = "Config." + s.field
			continue
		}
		v, ok := c.LookupEnv(c.EnvPrefix + s.name)
		if v = strings.TrimSpace(v); !ok || v == "" {
			continue // an empty variable means unset
		}
		if why := s.load(c, v); why != "" {
			errs = append(errs, &ConfigError{Setting: c.EnvPrefix + s.name, Value: v, Problem: why,
				Fix: "set it to " + s.form + ", or unset it"})
			continue
		}
		src[s.name] = c.EnvPrefix + s.name
	}
	return errs
}

// A defaultRule fills a setting that neither the code nor the environment
// set and returns the rule that chose the value, as Resolved.Sources and
// the startup log line record it ("" records nothing). It may read the
// settings above its row in the table, whose defaults are already chosen.
// A rule that also chooses another setting (a runner's drain bound chooses
// the teardown first) records that one in src itself.
type defaultRule func(c *Config, src map[string]string) (rule string)

// fixed is the rule of a default that depends on nothing: set fills it.
func fixed(set func(c *Config), rule string) defaultRule {
	return func(c *Config, _ map[string]string) string { set(c); return rule }
}

// chooseDefaults walks the table and gives each row still unset its
// default, a row marked chosenAfter right after the row it names.
func (c *Config) chooseDefaults(table []setting, src map[string]string) {
	var order []setting
	for _, s := range table {
		if s.after != "" {
			continue
		}
		order = append(order, s)
		for _, t := range table {
			if t.after == s.name {
				order = append(order, t)
			}
		}
	}
	for _, s := range order {
		c.chooseDefault(s, src)
	}
}

// chooseDefault gives s its default when it is unset. An extension's rule
// for the row is asked first; the row's own rule applies when that one
// left the setting unset and recorded nothing.
func (c *Config) chooseDefault(s setting, src map[string]string) {
	if !s.unset(c) {
		return
	}
	if rule := c.extensionDefault(s.name); rule != nil {
		if why := rule(c.extensionFields(src)); why != "" {
			src[s.name] = why
			return
		}
	}
	if s.byDefault == nil {
		return
	}
	if why := s.byDefault(c, src); why != "" {
		src[s.name] = why
	}
}

// defaultEnv detects Kubernetes by the variable the kubelet sets in every
// container.
func defaultEnv(c *Config, _ map[string]string) string {
	if v, _ := c.LookupEnv("KUBERNETES_SERVICE_HOST"); v != "" {
		c.Env = EnvKubernetes
		return "KUBERNETES_SERVICE_HOST is set"
	}
	c.Env = EnvLocal
	return "KUBERNETES_SERVICE_HOST is not set"
}

// byEnv is the rule of a default that depends only on where the process
// runs: inKubernetes's when Env is kubernetes, elsewhere's otherwise.
func byEnv(inKubernetes, elsewhere defaultRule) defaultRule {
	return func(c *Config, src map[string]string) string {
		if c.Env == EnvKubernetes {
			return inKubernetes(c, src)
		}
		return elsewhere(c, src)
	}
}

// defaultShutdownDelay is 5s in Kubernetes, for endpoint removal to
// propagate, and no window elsewhere: Ctrl-C stops now.
var defaultShutdownDelay = byEnv(
	fixed(func(c *Config) { c.ShutdownDelay = defaultKubernetesDelay }, "default in Kubernetes"),
	fixed(func(c *Config) { c.ShutdownDelay = NoDelay }, "default outside Kubernetes: Ctrl-C stops now"))

// defaultNotReadyAt keeps readiness through the window inside Kubernetes,
// where the EndpointSlice takes a terminating pod out of routing whatever
// its readiness and readiness only keeps a last endpoint serving
// (KEP-1669), and turns it 503 at the signal elsewhere, where a load
// balancer's own health check is the only routing signal
// (docs/probes-and-shutdown.md, "When readiness turns 503").
var defaultNotReadyAt = byEnv(
	fixed(func(c *Config) { c.NotReadyAt = NotReadyAtTeardown },
		"default in Kubernetes: the EndpointSlice takes the pod out; readiness keeps a last endpoint serving"),
	fixed(func(c *Config) { c.NotReadyAt = NotReadyAtSignal }, "default outside Kubernetes: readiness is the balancer's signal"))

// defaultPreStop turns the hook on when a token is set.
func defaultPreStop(c *Config, _ map[string]string) string {
	if c.PreStopToken == "" {
		return ""
	}
	c.PreStop = true
	return c.EnvPrefix + "PRESTOP_TOKEN is set"
}

// defaultTeardown chooses the teardown budget the code and the environment
// left unset. With a known grace period, or inside Kubernetes (whose
// default terminationGracePeriodSeconds is 30s), it is what the grace
// period leaves after the preStop sleep, the longest window and a margin,
// never below 1s; elsewhere 60s.
func defaultTeardown(c *Config, _ map[string]string) string {
	g, whose := c.TerminationGrace, "terminationGracePeriodSeconds"
	if g == 0 {
		if c.Env != EnvKubernetes {
			c.ShutdownTeardown = defaultLocalTeardown
			return "default outside Kubernetes"
		}
		g, whose = grace.DefaultTerminationGrace, "Kubernetes' default terminationGracePeriodSeconds"
	}
	margin := grace.Margin(g)
	d := g - c.PreStopDelay - c.maxWindow() - margin
	rule := fmt.Sprintf("default: %s %s − preStop %s − window %s − margin %s", whose, g, c.PreStopDelay, c.maxWindow(), margin)
	if d < minDefaultTeardown {
		d, rule = minDefaultTeardown, rule+fmt.Sprintf(" = %s, raised to the %s minimum", d, minDefaultTeardown)
	}
	c.ShutdownTeardown = d
	return rule
}

// A crossCheck checks settings against each other once every default is
// chosen, and returns one *ConfigError per problem. It may replace a
// refused value with its default, so the rest can still be reported.
type crossCheck func(c *Config, src map[string]string) []error

// crossChecks are the checks across settings, in the order of the shutdown
// timeline: the probes and the preStop hook the kubelet calls first, then
// the window, then the teardown.
var crossChecks = []crossCheck{
	checkPreStopIsGuarded,
	checkMaintenanceIsGuarded,
	checkProbePaths,
	checkDrainModeFitsProcess,
	checkIdleBoundCoversDelay,
	checkJoinFitsTeardown,
}

// checkDrainModeFitsProcess refuses a drain mode that an extension does
// not accept (a server's mode on a runner), and falls back to the default.
// A server's row accepts no other mode than its own.
func checkDrainModeFitsProcess(c *Config, src map[string]string) []error {
	if c.Extension == nil || len(c.Extension.DrainModes) == 0 || slices.Contains(c.Extension.DrainModes, c.DrainMode) {
		return nil
	}
	err := &ConfigError{Setting: named(c, src, "DRAIN_MODE"), Value: c.DrainMode, Problem: c.Extension.ModesProblem,
		Fix: "set one of them, or unset it"}
	c.DrainMode = ""
	c.chooseDefault(drainModeSetting(), src)
	return []error{err}
}

// checkIdleBoundCoversDelay refuses an idle drain whose bound,
// DRAIN_TIMEOUT, is shorter than its minimum, SHUTDOWN_DELAY.
func checkIdleBoundCoversDelay(c *Config, src map[string]string) []error {
	if c.DrainMode != DrainIdle || c.DrainTimeout >= c.window() {
		return nil
	}
	return []error{&ConfigError{Setting: named(c, src, "DRAIN_TIMEOUT"), Value: c.DrainTimeout.String(),
		Problem: fmt.Sprintf("shorter than %s=%s, the idle drain's minimum", named(c, src, "SHUTDOWN_DELAY"), c.window()),
		Fix:     "raise it to at least " + c.window().String()}}
}

// checkJoinFitsTeardown refuses a join cap that is not below the teardown
// it is spent inside, and drops it.
func checkJoinFitsTeardown(c *Config, src map[string]string) []error {
	if c.JoinBudget < c.ShutdownTeardown {
		return nil
	}
	err := &ConfigError{Setting: named(c, src, "JOIN_BUDGET"), Value: c.JoinBudget.String(),
		Problem: fmt.Sprintf("must be less than the teardown budget %s, which it is spent inside", c.ShutdownTeardown),
		Fix:     fmt.Sprintf("lower it, unset it (the join then uses whatever the teardown has left), or raise %sSHUTDOWN_TEARDOWN", c.EnvPrefix)}
	c.JoinBudget = 0
	return []error{err}
}

// named returns a setting as the operator wrote it: the Config field or the
// variable that set it, or the variable that would set it.
func named(c *Config, src map[string]string, name string) string {
	if s := src[name]; strings.HasPrefix(s, "Config.") || s == c.EnvPrefix+name {
		return s
	}
	return c.EnvPrefix + name
}

// Resolve fills every unset field of cfg from the environment and the
// defaults and checks the result exactly as [New] does — the same table of
// settings, the same parsers, the same defaults and the same errors — but
// binds nothing, starts nothing and logs nothing, and says which rule chose
// each value: a dry run of the configuration, for a --check-config flag or
// a deploy step (its Example). lameduck vet resolves a container's
// environment from a manifest with it, and checks the grace-period
// arithmetic that Run's first log line states against the pod. Set
// cfg.LookupEnv and cfg.Environ to read other variables than the
// process's own.
//
// It returns every problem, not just the first: one [*ConfigError] per
// refused setting, settings in the order of
// the table, then the checks across settings. New returns the same errors
// joined. Even with errors, Resolved is filled: a refused value counts as
// unset, so the rest can still be reported.
//
// It is safe for concurrent use when cfg's LookupEnv and Environ are.
func Resolve(cfg Config) (Resolved, []error) {
	c, src, errs := cfg.resolve()
	return Resolved{Config: c, Sources: src}, errs
}

// Resolved is a configuration resolved by [Resolve]: every field filled,
// and the rule that chose each value.
type Resolved struct {
	// Config has every field filled from the code, the environment or the
	// defaults, as Lifecycle.Config returns it. A refused value is left at
	// its default.
	Config Config
	// Sources maps a setting's name after the prefix ("SHUTDOWN_TEARDOWN")
	// to the rule that chose its value: the Config field
	// ("Config.ShutdownTeardown"), the variable ("LAMEDUCK_SHUTDOWN_TEARDOWN"),
	// or a default and its arithmetic ("default: Kubernetes' default
	// terminationGracePeriodSeconds 30s − preStop 0s − window 5s − margin 3s").
	// A setting left unset with no default (PROBE_ADDR, say) has no entry.
	Sources map[string]string
}
