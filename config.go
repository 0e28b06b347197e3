package lameduck

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lameduck/lameduck/health"
)

// DefaultEnvPrefix is the prefix of the environment variables lameduck reads
// when [Config.EnvPrefix] is empty.
const DefaultEnvPrefix = "LAMEDUCK_"

// NoDelay, set as [Config.ShutdownDelay], pins a zero lame-duck window
// whatever the environment says. (A zero ShutdownDelay means "unset": the
// environment, then the default, decides.) A zero window still flips
// readiness to 503 at the signal; it only removes the pause.
const NoDelay time.Duration = -1

// Environments that [Config.Env] and LAMEDUCK_ENV accept.
const (
	// EnvKubernetes selects the in-cluster defaults: a 5s
	// lame-duck window and a 30s teardown.
	EnvKubernetes = "kubernetes"
	// EnvLocal selects the laptop defaults: no window (Ctrl-C stops now) and
	// a 60s teardown.
	EnvLocal = "local"
)

// Drain modes that [Config.DrainMode] and LAMEDUCK_DRAIN_MODE accept.
const (
	// DrainDelay waits the fixed lame-duck window, ShutdownDelay, after the
	// signal.
	DrainDelay = "delay"
	// DrainIdle waits until the pod's traffic goes idle: nothing in flight
	// and no request arrived or completed for IdleWindow, at least
	// ShutdownDelay and at most DrainTimeout after the signal.
	DrainIdle = "idle"
	// DrainComplete, for a runner (Config.Runner), finishes the job in
	// flight after the signal, bounded by DrainTimeout; no new job is
	// taken. The runner default. See docs/runners.md.
	DrainComplete = "complete"
	// DrainInterrupt, for a runner, cancels the context of the job in
	// flight at the signal, so it can checkpoint, and hands the job back to
	// its queue. See docs/runners.md.
	DrainInterrupt = "interrupt"
)

// Runner defaults (docs/runners.md, "Sizing").
const (
	// DefaultRunnerProbeAddr is where a runner serves its probes when
	// ProbeAddr is unset: the metrics port, where /metrics can live too.
	DefaultRunnerProbeAddr = ":9090"
	// DefaultRunnerDrainTimeout bounds a runner's drain: a job may take
	// hours, and a deploy should not throw its work away.
	DefaultRunnerDrainTimeout = 8 * time.Hour
	// DefaultEpochMismatchDelay is how long a superseded runner delays the
	// redelivery of a job it hands back, while the newer fleet becomes
	// ready.
	DefaultEpochMismatchDelay = 2 * time.Minute
	// DefaultFetchWait is how long a consume loop's fetch waits for a job
	// before it returns empty (one idle cycle).
	DefaultFetchWait = 5 * time.Second
)

// ErrInvalidConfig is wrapped by every error [New] returns for a bad
// setting, whether it came from a Config field or an environment variable.
// The error's text names the setting, the value and the fix.
var ErrInvalidConfig = errors.New("invalid configuration")

// Config configures a [Lifecycle]. Every setting is a field; the environment
// (variables named EnvPrefix + the name given below) fills only the fields
// the code left at their zero value, and a built-in default fills the rest.
//
// The zero Config is valid: it reads everything from the environment and
// defaults (docs/probes-and-shutdown.md, "Configuration"):
// inside Kubernetes (KUBERNETES_SERVICE_HOST is set, or LAMEDUCK_ENV is
// "kubernetes") the window is 5s and the teardown 30s; elsewhere the window
// is 0 and the teardown 60s, so Ctrl-C on a laptop stops now.
//
// Durations in the environment are Go durations with a unit ("5s",
// "250ms"); a bare number, a negative value or a zero teardown is an error
// that names the variable, the value and the fix, never a silent zero. An
// empty variable means unset. With the default prefix, a LAMEDUCK_ variable
// that is not a lameduck setting is an error too, so a misspelt name is not
// silently ignored; with a prefix the application chose, which its own
// variables may share, no such check is made.
type Config struct {
	// EnvPrefix is the prefix of the environment variables read. Default
	// "LAMEDUCK_".
	EnvPrefix string
	// LookupEnv reads one environment variable. Default os.LookupEnv. Tests
	// set it to read from a map.
	LookupEnv func(key string) (string, bool)
	// Environ lists the environment as "KEY=value" strings, used only to
	// find misspelt variables. Default os.Environ; when LookupEnv is set and
	// Environ is not, no such check is made.
	Environ func() []string

	// Env is EnvKubernetes or EnvLocal and selects the defaults below.
	// Env: ENV. Default: EnvKubernetes when KUBERNETES_SERVICE_HOST is set,
	// else EnvLocal.
	Env string
	// ShutdownDelay is the lame-duck window, a time.Duration: how long the
	// application keeps serving normally after the signal, with /readyz
	// already 503, so that endpoint removal can reach kube-proxy, ingresses
	// and load balancers before the listener closes. Zero means unset; use
	// NoDelay for a zero window. Negative values other than NoDelay are an
	// error. Env: SHUTDOWN_DELAY. Default 5s in Kubernetes, 0 elsewhere and
	// for a runner.
	ShutdownDelay time.Duration
	// ShutdownTeardown is the budget, a time.Duration, for everything after
	// the window: the HTTP drain (http.Server.Shutdown of every server and a
	// wait for every tracked handler, WebSockets included) beside the drain
	// hooks, then the background join and the closers. When a service uses
	// background work or closers, the tail of the budget is kept for them
	// (JoinBudget each, at most half of the budget); otherwise in-flight
	// requests get all of it. When the HTTP drain's share is spent, what is
	// left is closed by force, named in the log, and Run returns an error
	// wrapping context.DeadlineExceeded. Zero means unset; it must be
	// positive, because a zero budget cuts every in-flight request at once
	// (its context has expired before the drain starts).
	// Env: SHUTDOWN_TEARDOWN. Default 30s in Kubernetes, 60s elsewhere.
	ShutdownTeardown time.Duration
	// TerminationGrace is the pod's terminationGracePeriodSeconds, as a
	// time.Duration, which a chart passes in. When set, Run logs the shutdown
	// budget against it and warns, with every number, when delay + teardown
	// does not fit. Zero means unknown. Env: TERMINATION_GRACE.
	TerminationGrace time.Duration

	// DrainMode is DrainDelay (the default) or DrainIdle and decides how the
	// lame-duck window ends. For a runner (Runner set) it is DrainComplete
	// (the default) or DrainInterrupt and decides what happens to the job in
	// flight. Env: DRAIN_MODE.
	DrainMode string
	// IdleWindow, a time.Duration, is how long traffic must have been idle
	// for the idle drain to end: nothing in flight (WebSockets and other
	// hijacked connections aside) and no application request arrived or
	// completed, and no KeepAlive call, for this long. Only in DrainIdle
	// mode. Zero means unset; negative is an error. Env: IDLE_WINDOW.
	// Default 10s.
	IdleWindow time.Duration
	// DrainTimeout, a time.Duration, bounds the idle drain's wait after the
	// signal, so a steady trickle of traffic cannot hold the pod past its
	// grace period. In DrainIdle mode it must be at least ShutdownDelay. For
	// a runner it bounds the wait for the jobs in flight: at the bound their
	// contexts are cancelled and each is named in the log with its age.
	// Zero means unset. Env: DRAIN_TIMEOUT. Default 30s; 8h for a runner.
	DrainTimeout time.Duration
	// SendRetryAfter keeps the listeners open during teardown, until the
	// in-flight requests have drained, and answers every new request with
	// 503, Retry-After: 1 and Connection: close instead of a refused
	// connection: for deployments without a readiness-aware load balancer
	// (the Kubernetes API server's --shutdown-send-retry-after does the
	// same: https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/). Env: SEND_RETRY_AFTER.
	SendRetryAfter bool

	// JoinBudget is the one budget, a time.Duration, for joining every
	// background task (GoWrite, GoLoop) after the HTTP drain. It is spent
	// inside the teardown budget, not added to it, so the exit costs the
	// same whether the application started two tasks or twenty
	// (docs/probes-and-shutdown.md, "Teardown: hooks, HTTP drain, background
	// join, closers"). Tasks still running when it is spent are
	// named once in a warning. Zero means unset; it must be positive and
	// less than ShutdownTeardown. Env: JOIN_BUDGET. Default 500ms.
	JoinBudget time.Duration
	// HookShare is the largest fraction of the teardown budget the drain
	// hooks may use, in (0, 1); the HTTP drain gets at least the rest, so
	// in-flight requests keep a window (by default ⅔ for hooks, ⅓ at least
	// for requests). Zero
	// means unset. Env: HOOK_SHARE (such as "0.5"). Default 2/3.
	HookShare float64
	// OnPanic, when set, receives every panic lameduck recovers (in a
	// background task, a drain hook, a closer): what panicked ("write
	// audit-row"), the value and the stack. Hand it to the error tracker.
	// It must be safe for concurrent use; a panic inside it is swallowed.
	OnPanic func(what string, value any, stack []byte)

	// CheckTimeout, a time.Duration, is the deadline of every readiness
	// check added without a Timeout of its own, so a probe answers in the
	// slowest check's time, not the sum of them. Zero means unset; negative is an error.
	// Env: CHECK_TIMEOUT. Default 1s.
	CheckTimeout time.Duration
	// HideCheckErrors makes readiness bodies carry status words only
	// ("error", "timeout", "panic") and never error or panic text, for
	// probes reachable by people who must not learn about the backends.
	// Logs still carry the text, redacted of credentials.
	HideCheckErrors bool

	// PreStop serves GET /prestop, a preStop hook over HTTP: it starts the
	// shutdown sequence exactly as SIGTERM does and answers 200 when the
	// lame-duck window has passed. Env: PRESTOP ("true"/"false"). Default
	// false. Setting PreStopToken turns it on too.
	PreStop bool
	// PreStopToken, when set, is required in the X-Lameduck-Token header of
	// GET /prestop; a request without it gets 401 and drains nothing, since
	// anyone who reaches the port could otherwise drain the pod.
	// Env: PRESTOP_TOKEN.
	PreStopToken string
	// ExitOnSecondSignal makes a second SIGTERM or SIGINT, after a first
	// signal started the sequence, exit the process at once with code 128 +
	// the signal's number, for people at a terminal. By default a second
	// signal is logged and changes nothing: once started, the sequence runs
	// to its end or its own deadline (docs/probes-and-shutdown.md, "Second
	// signals"). The SIGTERM that the kubelet
	// sends after a GET /prestop hook is never a second signal.
	// Env: EXIT_ON_SECOND_SIGNAL ("true"/"false").
	ExitOnSecondSignal bool
	// ProbeAddr, when set, serves the probes on their own listener at this
	// address (such as ":9090") instead of on every server registered with
	// AddServer. The default, probes on the application's own listener,
	// makes liveness prove that listener answers. The probe listener closes
	// after the application's servers have drained (before the background
	// join and the closers). Env: PROBE_ADDR.
	ProbeAddr string

	// Runner makes this the Lifecycle of a runner: a process that consumes
	// jobs from a queue rather than serving requests (docs/runners.md). The
	// worker package sets it. A runner serves its probes on ProbeAddr
	// (default ":9090"), its DrainMode is DrainComplete or DrainInterrupt,
	// its DrainTimeout defaults to 8h and bounds the window, and its
	// ShutdownDelay defaults to 0 (no Service routes to it, so there is no
	// endpoint removal to wait for).
	Runner bool
	// Epoch is the runner's rollout epoch, a monotonic generation rendered
	// literally into the pod template; a runner whose epoch is older than
	// the newest in its fleet is superseded (docs/runners.md, "Rollout
	// epochs"). Zero means unset. Env: EPOCH, a non-negative integer.
	// Default 0.
	Epoch uint64
	// EpochMismatchDelay, a time.Duration, is how long a superseded runner
	// delays the redelivery of a job it hands back, so that the newer fleet
	// takes it. Zero means unset; negative is an error.
	// Env: EPOCH_MISMATCH_DELAY. Default 2m.
	EpochMismatchDelay time.Duration
	// FetchWait, a time.Duration, is how long a runner's consume loop waits
	// for a job in one fetch, unless the loop sets its own. A loop that has
	// not cycled for max(2m, 20 × its fetch wait) is stalled and fails
	// liveness. Zero means unset; negative is an error. Env: FETCH_WAIT.
	// Default 5s.
	FetchWait time.Duration

	// Version and Commit are written into every probe body. Default: read
	// from the binary's build information (health.BuildInfo).
	Version, Commit string
	// Fields, when set, adds members to every probe body (such as
	// {"mode":"cloud"}); it is called once per probe, concurrently.
	Fields func() map[string]any
	// Logger receives one line per phase change. Default slog.Default().
	Logger *slog.Logger
	// Clock is the source of time for the window, the budget and request
	// ages. Default: the system clock. Tests inject lameducktest.Clock.
	Clock Clock
	// Signals start the shutdown sequence. Default SIGTERM and SIGINT.
	// Set IgnoreSignals to listen for none (embedding, tests).
	Signals []os.Signal
	// IgnoreSignals stops Run from listening for signals at all; the
	// sequence then starts only through BeginShutdown, GET /prestop, Run's
	// context or a fatal error.
	IgnoreSignals bool
}

// setting describes one environment variable.
type setting struct {
	name string // without the prefix
	fix  string // an example of a good value
}

var settings = []setting{
	{"ENV", `"kubernetes" or "local"`},
	{"SHUTDOWN_DELAY", `a Go duration with a unit, such as "5s"`},
	{"SHUTDOWN_TEARDOWN", `a positive Go duration with a unit, such as "30s"`},
	{"TERMINATION_GRACE", `the pod's terminationGracePeriodSeconds as a Go duration, such as "60s"`},
	{"PRESTOP", `"true" or "false"`},
	{"PRESTOP_TOKEN", `any non-empty secret`},
	{"EXIT_ON_SECOND_SIGNAL", `"true" or "false"`},
	{"PROBE_ADDR", `a listen address such as ":9090"`},
	{"DRAIN_MODE", `"delay" or "idle" ("complete" or "interrupt" for a runner)`},
	{"IDLE_WINDOW", `a positive Go duration, such as "10s"`},
	{"DRAIN_TIMEOUT", `a positive Go duration at least the shutdown delay, such as "30s"`},
	{"SEND_RETRY_AFTER", `"true" or "false"`},
	{"CHECK_TIMEOUT", `a positive Go duration, such as "1s"`},
	{"JOIN_BUDGET", `a positive Go duration below the teardown budget, such as "500ms"`},
	{"HOOK_SHARE", `a fraction between 0 and 1, such as "0.66"`},
	{"EPOCH", `a non-negative integer, such as "3"`},
	{"EPOCH_MISMATCH_DELAY", `a positive Go duration, such as "2m"`},
	{"FETCH_WAIT", `a positive Go duration, such as "5s"`},
}

// resolve fills every unset field of c from the environment and defaults and
// validates the result. It returns all problems at once, joined.
func (c Config) resolve() (Config, error) {
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
		c.Logger = slog.Default()
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

	var errs []error
	env := func(name string) (string, bool) {
		v, ok := c.LookupEnv(c.EnvPrefix + name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	bad := func(name, value, why string) {
		fix := ""
		for _, s := range settings {
			if s.name == name {
				fix = s.fix
			}
		}
		errs = append(errs, fmt.Errorf("lameduck: %s%s=%q: %s; set it to %s, or unset it: %w",
			c.EnvPrefix, name, value, why, fix, ErrInvalidConfig))
	}
	// dur fills an unset duration from the environment and reports the raw
	// value it read.
	dur := func(field *time.Duration, name string) (raw string, fromEnv bool) {
		if *field != 0 {
			return "", false
		}
		v, ok := env(name)
		if !ok {
			return "", false
		}
		d, err := parseDuration(v)
		if err != nil {
			bad(name, v, err.Error())
			return v, false
		}
		*field = d
		return v, true
	}
	// positive is dur for a setting that must be greater than zero; why
	// explains what zero would do.
	positive := func(field *time.Duration, fieldName, name, why string) (fromEnv bool) {
		if *field < 0 {
			errs = append(errs, fmt.Errorf("lameduck: Config.%s=%s: must be positive: %w", fieldName, *field, ErrInvalidConfig))
			*field = 0
			return false
		}
		raw, ok := dur(field, name)
		if ok && *field <= 0 {
			bad(name, raw, "must be greater than zero"+why)
			*field = 0
			return false
		}
		return ok
	}
	boolean := func(field *bool, name string) {
		if *field {
			return
		}
		if v, ok := env(name); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				bad(name, v, "not a boolean")
				return
			}
			*field = b
		}
	}
	str := func(field *string, name string) {
		if *field == "" {
			if v, ok := env(name); ok {
				*field = v
			}
		}
	}

	// Unknown variables with our prefix: a typo must not be silently lost.
	// Only with lameduck's own prefix: an application that chose its own
	// shares it with its own variables.
	if c.Environ != nil && c.EnvPrefix == DefaultEnvPrefix {
		for _, kv := range c.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			name, ok := strings.CutPrefix(k, c.EnvPrefix)
			if !ok {
				continue
			}
			if !slices.ContainsFunc(settings, func(s setting) bool { return s.name == name }) {
				known := make([]string, len(settings))
				for i, s := range settings {
					known[i] = c.EnvPrefix + s.name
				}
				errs = append(errs, fmt.Errorf("lameduck: %s is not a lameduck setting; known: %s; fix the spelling or unset it: %w",
					k, strings.Join(known, ", "), ErrInvalidConfig))
			}
		}
	}

	str(&c.Env, "ENV")
	envFromVar := c.Env != ""
	switch c.Env {
	case EnvKubernetes, EnvLocal:
	case "":
		if v, _ := c.LookupEnv("KUBERNETES_SERVICE_HOST"); v != "" {
			c.Env = EnvKubernetes
		} else {
			c.Env = EnvLocal
		}
	default:
		if envFromVar {
			bad("ENV", c.Env, "unknown environment")
		}
		c.Env = EnvLocal
	}

	delaySet := c.ShutdownDelay != 0
	if c.ShutdownDelay < 0 && c.ShutdownDelay != NoDelay {
		errs = append(errs, fmt.Errorf("lameduck: Config.ShutdownDelay=%s: must not be negative; use lameduck.NoDelay for a zero window: %w", c.ShutdownDelay, ErrInvalidConfig))
	}
	if raw, ok := dur(&c.ShutdownDelay, "SHUTDOWN_DELAY"); ok {
		delaySet = true
		if c.ShutdownDelay < 0 {
			bad("SHUTDOWN_DELAY", raw, "must not be negative")
		} else if c.ShutdownDelay == 0 {
			c.ShutdownDelay = NoDelay
		}
	}
	positive(&c.ShutdownTeardown, "ShutdownTeardown", "SHUTDOWN_TEARDOWN", ": a zero teardown cuts every in-flight request at once")
	positive(&c.TerminationGrace, "TerminationGrace", "TERMINATION_GRACE", "")
	boolean(&c.PreStop, "PRESTOP")
	str(&c.PreStopToken, "PRESTOP_TOKEN")
	if c.PreStopToken != "" {
		c.PreStop = true
	}
	boolean(&c.ExitOnSecondSignal, "EXIT_ON_SECOND_SIGNAL")
	str(&c.ProbeAddr, "PROBE_ADDR")

	str(&c.DrainMode, "DRAIN_MODE")
	switch {
	case c.DrainMode == "" && c.Runner:
		c.DrainMode = DrainComplete
	case c.DrainMode == "":
		c.DrainMode = DrainDelay
	case c.Runner && (c.DrainMode == DrainComplete || c.DrainMode == DrainInterrupt):
	case !c.Runner && (c.DrainMode == DrainDelay || c.DrainMode == DrainIdle):
	case c.Runner:
		errs = append(errs, fmt.Errorf("lameduck: %sDRAIN_MODE=%q: a runner drains in mode %q (finish the job in flight) or %q (cancel it and hand it back); set one of them, or unset it: %w",
			c.EnvPrefix, c.DrainMode, DrainComplete, DrainInterrupt, ErrInvalidConfig))
	default:
		bad("DRAIN_MODE", c.DrainMode, "unknown drain mode")
	}
	positive(&c.IdleWindow, "IdleWindow", "IDLE_WINDOW", "")
	positive(&c.DrainTimeout, "DrainTimeout", "DRAIN_TIMEOUT", "")
	positive(&c.EpochMismatchDelay, "EpochMismatchDelay", "EPOCH_MISMATCH_DELAY", "")
	positive(&c.FetchWait, "FetchWait", "FETCH_WAIT", "")
	if v, ok := env("EPOCH"); ok && c.Epoch == 0 {
		if n, err := strconv.ParseUint(v, 10, 64); err != nil {
			bad("EPOCH", v, "not a non-negative integer")
		} else {
			c.Epoch = n
		}
	}
	if c.EpochMismatchDelay == 0 {
		c.EpochMismatchDelay = DefaultEpochMismatchDelay
	}
	if c.FetchWait == 0 {
		c.FetchWait = DefaultFetchWait
	}
	if c.Runner && c.ProbeAddr == "" {
		c.ProbeAddr = DefaultRunnerProbeAddr
	}
	positive(&c.CheckTimeout, "CheckTimeout", "CHECK_TIMEOUT", "")
	if c.CheckTimeout == 0 {
		c.CheckTimeout = health.DefaultCheckTimeout
	}
	if c.IdleWindow == 0 {
		c.IdleWindow = 10 * time.Second
	}
	if c.DrainTimeout == 0 && c.Runner {
		c.DrainTimeout = DefaultRunnerDrainTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	boolean(&c.SendRetryAfter, "SEND_RETRY_AFTER")

	joinFromEnv := positive(&c.JoinBudget, "JoinBudget", "JOIN_BUDGET", "")
	if !(c.HookShare >= 0 && c.HookShare < 1) { // NaN too
		errs = append(errs, fmt.Errorf("lameduck: Config.HookShare=%g: must be in (0, 1): %w", c.HookShare, ErrInvalidConfig))
	}
	if v, ok := env("HOOK_SHARE"); ok && c.HookShare == 0 {
		f, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil:
			bad("HOOK_SHARE", v, "not a number")
		case !(f > 0 && f < 1): // NaN and ±Inf too
			bad("HOOK_SHARE", v, "must be between 0 and 1, exclusive")
		default:
			c.HookShare = f
		}
	}
	if c.HookShare == 0 {
		c.HookShare = 2.0 / 3
	}

	if !delaySet {
		if c.Env == EnvKubernetes && !c.Runner {
			c.ShutdownDelay = 5 * time.Second
		} else {
			c.ShutdownDelay = NoDelay
		}
	}
	if c.ShutdownTeardown == 0 {
		if c.Env == EnvKubernetes {
			c.ShutdownTeardown = 30 * time.Second
		} else {
			c.ShutdownTeardown = 60 * time.Second
		}
	}
	if c.JoinBudget == 0 {
		c.JoinBudget = min(500*time.Millisecond, c.ShutdownTeardown/2)
	}
	if c.DrainMode == DrainIdle && c.DrainTimeout < c.window() {
		errs = append(errs, fmt.Errorf("lameduck: %sDRAIN_TIMEOUT=%s is shorter than %sSHUTDOWN_DELAY=%s, the idle drain's minimum; raise it: %w",
			c.EnvPrefix, c.DrainTimeout, c.EnvPrefix, c.window(), ErrInvalidConfig))
	}
	if c.JoinBudget >= c.ShutdownTeardown {
		where := "Config.JoinBudget"
		if joinFromEnv {
			where = c.EnvPrefix + "JOIN_BUDGET"
		}
		errs = append(errs, fmt.Errorf("lameduck: %s=%s: must be less than the teardown budget %s, which it is spent inside; lower it or raise %sSHUTDOWN_TEARDOWN: %w",
			where, c.JoinBudget, c.ShutdownTeardown, c.EnvPrefix, ErrInvalidConfig))
	}
	return c, errors.Join(errs...)
}

// window returns the resolved lame-duck window (NoDelay becomes 0).
func (c *Config) window() time.Duration { return max(c.ShutdownDelay, 0) }

// maxWindow returns the longest the lame-duck window can last: the delay, or
// the idle drain's bound, or the runner's drain bound.
func (c *Config) maxWindow() time.Duration {
	if c.DrainMode == DrainIdle || c.Runner {
		return max(c.DrainTimeout, c.window())
	}
	return c.window()
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
