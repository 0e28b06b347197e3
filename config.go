package lameduck

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/lameduck/lameduck/internal/extend"
	"github.com/lameduck/lameduck/internal/grace"
)

// defaultEnvPrefix is the prefix of the environment variables lameduck
// reads when [Config.EnvPrefix] is empty.
const defaultEnvPrefix = "LAMEDUCK_"

// NoDelay, set as [Config.ShutdownDelay], pins a zero lame-duck window
// whatever the environment says. (A zero ShutdownDelay means "unset": the
// environment, then the default, decides.) A zero window still flips
// readiness to 503 at the signal; it only removes the pause.
const NoDelay time.Duration = -1

// Environments that [Config.Env] and LAMEDUCK_ENV accept.
const (
	// EnvKubernetes selects the in-cluster defaults: a 5s lame-duck window
	// and a teardown that fits the grace period (Kubernetes' default 30s
	// unless TerminationGrace says otherwise): 22s with every default.
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
)

// When readiness turns 503 in the shutdown sequence, the values that
// [Config.NotReadyAt] and LAMEDUCK_NOT_READY_AT accept
// (docs/probes-and-shutdown.md, "When readiness turns 503").
const (
	// NotReadyAtSignal turns /readyz 503 at the signal, for the whole
	// lame-duck window: what a load balancer that probes the pod itself
	// needs to stop sending to it (the seeds' readiness drain). The
	// default outside Kubernetes.
	NotReadyAtSignal = "signal"
	// NotReadyAtTeardown keeps /readyz 200 (status "draining") through the
	// lame-duck window and turns it 503 when the teardown begins. The
	// EndpointSlice marks a terminating pod's endpoint ready=false whatever
	// its readiness, so kube-proxy and the ingresses that read endpoints
	// stop sending to it all the same; readiness only keeps the endpoint
	// "serving", which is what kube-proxy (KEP-1669, Kubernetes ≥ 1.26)
	// and Traefik fall back to when a Service has no ready endpoint left:
	// the pod that is the last endpoint (one replica, maxSurge 0,
	// Recreate, externalTrafficPolicy: Local) keeps its traffic until a
	// replacement is ready. The default inside Kubernetes.
	NotReadyAtTeardown = "teardown"
)

// Config configures a [Lifecycle]. Every setting is a field; the environment
// (variables named EnvPrefix + the name given below) fills only the fields
// the code left at their zero value, and a built-in default fills the rest.
//
// The zero Config is valid: it reads everything from the environment and
// defaults. Inside Kubernetes (KUBERNETES_SERVICE_HOST is set, or
// LAMEDUCK_ENV is "kubernetes") the window is 5s and the teardown is what
// the pod's grace period leaves (see ShutdownTeardown), so the sequence fits
// terminationGracePeriodSeconds out of the box; elsewhere the window is 0
// and the teardown 60s, so Ctrl-C on a laptop stops now. Run's first log
// line says which rule chose each number (docs/probes-and-shutdown.md,
// "Configuration").
//
// Durations in the environment are Go durations with a unit ("5s",
// "250ms"); a bare number, a negative value or a zero teardown is an error
// that names the variable, the value and the accepted form, never a silent
// zero. Choices (ENV, DRAIN_MODE) and booleans accept any case. An empty
// variable means unset. With the default prefix, a LAMEDUCK_ variable that
// is not a lameduck setting is an error too, so a misspelt name is not
// silently ignored; with a prefix the application chose, which its own
// variables may share, no such check is made. [Resolve] resolves a Config
// exactly as New does without starting anything.
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

	// Env is EnvKubernetes or EnvLocal and selects the defaults below. Any
	// case is accepted. Env: ENV. Default: EnvKubernetes when KUBERNETES_SERVICE_HOST is set,
	// else EnvLocal.
	Env string
	// ShutdownDelay is the lame-duck window, a time.Duration: how long the
	// application keeps serving normally after the signal, with /readyz
	// already 503, so that endpoint removal can reach kube-proxy, ingresses
	// and load balancers before the listener closes. Zero means unset; use
	// NoDelay for a zero window. Negative values other than NoDelay are an
	// error. Env: SHUTDOWN_DELAY. Default 5s in Kubernetes, 0 elsewhere.
	ShutdownDelay time.Duration
	// ShutdownTeardown is the budget, a time.Duration, for everything after
	// the window: the HTTP drain (http.Server.Shutdown of every server and a
	// wait for every tracked handler, WebSockets included) beside the teardown
	// hooks, then the background join and the closers. When a service uses
	// background work or closers, a tail of the budget is kept for them
	// (500ms, or JoinBudget, each; at most half of the budget); otherwise
	// in-flight requests get all of it. When the HTTP drain's share is
	// spent, what is left is closed by force, named in the log, and Run
	// returns an error wrapping context.DeadlineExceeded. Zero means unset;
	// it must be positive, because a zero budget cuts every in-flight
	// request at once. Env: SHUTDOWN_TEARDOWN.
	//
	// Default: with a known grace period (TerminationGrace), or inside
	// Kubernetes, where the grace period is 30s unless the pod says
	// otherwise, what the grace period leaves after the preStop sleep
	// (PreStopDelay), the longest window (ShutdownDelay, or DrainTimeout in
	// DrainIdle mode) and a margin of a tenth of the grace period (at least
	// 2s, at most 10s), never below 1s: 22s for the 30s default grace and a
	// 5s delay. Elsewhere 60s. Kubernetes sends SIGKILL when the grace
	// period ends (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle,
	// "Termination of Pods").
	ShutdownTeardown time.Duration
	// TerminationGrace is the pod's terminationGracePeriodSeconds, as a
	// time.Duration, which a chart passes in. Run logs the shutdown budget
	// against it and warns, with every number, when preStop + window +
	// teardown does not fit; the teardown's default is derived from it.
	// Zero means unknown: inside Kubernetes, its default of 30s is assumed.
	// Env: TERMINATION_GRACE.
	TerminationGrace time.Duration
	// PreStopDelay is the length, a time.Duration, of a preStop hook that
	// sleeps before the kubelet sends SIGTERM (an exec "sleep 5", or the
	// native sleep action). Its time counts against the grace period
	// (kubernetes.io/docs/concepts/containers/container-lifecycle-hooks), so
	// the budget arithmetic and the teardown's default subtract it; lameduck
	// does nothing else with it. The GET /prestop hook (PreStop) needs no
	// entry here: it starts the window itself, so its time is the window's.
	// Zero means none; negative is an error. Env: PRESTOP_DELAY.
	PreStopDelay time.Duration

	// DrainMode is DrainDelay (the default) or DrainIdle and decides how the
	// lame-duck window ends. Any case is accepted. Env: DRAIN_MODE.
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
	// grace period. In DrainIdle mode it must be at least ShutdownDelay.
	// Zero means unset. Env: DRAIN_TIMEOUT. Default 30s. A value longer
	// than the grace allows is a startup warning with both numbers and the
	// fix.
	DrainTimeout time.Duration
	// SendRetryAfter keeps the listeners open during teardown, until the
	// in-flight requests have drained, and answers every new request with
	// 503, Retry-After: 1 and Connection: close instead of a refused
	// connection: for deployments without a readiness-aware load balancer
	// (the Kubernetes API server's --shutdown-send-retry-after does the
	// same: https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/). Env: SEND_RETRY_AFTER.
	SendRetryAfter bool
	// MaxConnectionAge, when positive, closes a client connection of the
	// servers registered with AddServer once it is that old (give or take
	// 10%, at random per connection, as grpc-go's MaxConnectionAge does):
	// the first response after that carries Connection: close, so an
	// HTTP/1 connection closes after it and an HTTP/2 one gets GOAWAY and
	// ends when its streams have. Clients then reconnect, and a new
	// connection lands wherever the Service sends it: after a rollout,
	// long-lived HTTP/2 connections otherwise stay on the pods that came up
	// first (docs/probes-and-shutdown.md, "Connection age"). The request
	// that finds the connection old is served in full; an idle connection is
	// left to the server's IdleTimeout. It costs each client a new
	// connection (and TLS handshake) per age. Zero (the default) turns it
	// off; negative is an error. The gRPC path is contrib/grpc's
	// ServerOptions (grpc-go's keepalive.ServerParameters). Env:
	// MAX_CONNECTION_AGE.
	MaxConnectionAge time.Duration
	// NotReadyAt says when /readyz (and the gRPC and Connect health
	// services that read it) turns 503 in the shutdown sequence:
	// NotReadyAtSignal (the default) at the signal, NotReadyAtTeardown when
	// the lame-duck window ends and the teardown begins, answering 200
	// {"status":"draining","not_ready_at":"teardown"} in the window. Any
	// case is accepted; another value is an error. Default: teardown
	// inside Kubernetes (Env), where the EndpointSlice takes a terminating
	// pod out of routing whatever its readiness and readiness only keeps a
	// last endpoint serving; signal elsewhere, where readiness is what a
	// load balancer routes by. Choose signal in Kubernetes when a load
	// balancer probes the pod itself and routes by that answer alone
	// (docs/probes-and-shutdown.md, "When readiness turns 503", has the
	// measured table). Env: NOT_READY_AT.
	NotReadyAt string

	// JoinBudget caps, as a time.Duration, the background join: the one wait
	// for every background task (GoWrite, GoLoop) after the HTTP drain. By
	// default there is no cap: the join may use whatever the teardown budget
	// has left, so nothing is abandoned while the grace period still has
	// room, and the bound of the whole sequence (window + teardown) is the
	// same with or without background work. When set, it also sizes the
	// tail of the teardown kept for the join should requests overrun. Tasks
	// still running at the bound are named once in a warning that names the
	// setting that widens it, and Run returns an error wrapping
	// context.DeadlineExceeded. Zero means no cap; it must be positive and
	// less than ShutdownTeardown. Env: JOIN_BUDGET.
	JoinBudget time.Duration
	// HookShare is the largest fraction of the teardown budget the teardown
	// hooks (AddTeardownHook) may use, in (0, 1); the HTTP drain gets at
	// least the rest, so in-flight requests keep a window (by default ⅔ for
	// hooks, ⅓ at least for requests). Zero means unset. Env: HOOK_SHARE (such as "0.5"). Default 2/3.
	HookShare float64
	// StartupTimeout bounds the boot, as a time.Duration from the start of
	// Run: every startup task, retries included. At the bound the running
	// task's context is cancelled, no further try or task starts, and Run
	// returns an error wrapping ErrStartupFailed that names the task, its
	// tries and the time spent. A task that ignores its context does not
	// hold the boot: 100ms after the bound the boot fails without it (it is
	// left running, and named again at exit if it still runs). Size it below the startup probe's budget,
	// failureThreshold × periodSeconds
	// (kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes),
	// so the process says why it gave up before the kubelet kills it.
	// Zero means no bound: a retrying task then retries until it succeeds or
	// the shutdown sequence starts. Env: STARTUP_TIMEOUT.
	StartupTimeout time.Duration

	// OnPanic, when set, receives every panic lameduck recovers (in a
	// background task, a teardown hook, a closer): what panicked ("write
	// audit-row"), the value and the stack. Hand it to the error tracker.
	// It must be safe for concurrent use; a panic inside it is swallowed.
	OnPanic func(what string, value any, stack []byte)
	// OnTransition, when set, hears what happens to the Lifecycle, as
	// [Transition] values: each event of the sequence as it fires (the
	// phase changes and the shutdown steps), each readiness check's verdict
	// with its duration, each probe's answer (path and status code), the
	// requests the teardown cut and the background tasks it abandoned. It
	// is for metrics and tracing; contrib/prometheus builds its collector
	// on it. It is called synchronously, never with a lock held, from the
	// goroutine where the thing happened (a probe's, a ping's, Run's), often
	// concurrently: it must be safe for concurrent use and return at once
	// (increment a counter; never block, never call back into the
	// Lifecycle's shutdown). Nil, the default, costs nothing: no wrapper is
	// installed and no Transition is built.
	OnTransition func(Transition)

	// CheckTimeout, a time.Duration, is the deadline of every readiness
	// check added without a Timeout of its own, so a probe answers in the
	// slowest check's time, not the sum of them. Zero means unset; negative is an error.
	// Env: CHECK_TIMEOUT. Default 1s.
	CheckTimeout time.Duration
	// CheckMaxAge, a time.Duration, is the MaxAge of every readiness check
	// added without one of its own (health.Check.MaxAge): a probe within
	// CheckMaxAge of a check's last answered ping reads that result instead
	// of pinging again, so a shared dependency sees at most one ping per
	// CheckMaxAge from each pod, whatever the number of probers. Zero, the
	// default, pings on every probe; negative is an error. Keep it well
	// under the readiness probe's periodSeconds × failureThreshold
	// (docs/probes-and-shutdown.md, "A ping budget per dependency").
	// Env: CHECK_MAX_AGE. Default 0.
	CheckMaxAge time.Duration
	// CheckDetails decides where readiness bodies show a failing check's
	// detail (its redacted error, panic or gate reason, which can name the
	// host, port and database of an internal system) rather than its
	// outcome word alone ("error", "timeout", "panic", "failed"):
	//
	//   - CheckDetailsAuto (the default): shown on the probe-only listener
	//     (ProbeAddr), hidden on a listener that also serves the application
	//     (and by ProbeHandler), since an Ingress may expose that port to the
	//     internet;
	//   - CheckDetailsShow: shown everywhere;
	//   - CheckDetailsHide: hidden everywhere.
	//
	// Status words, codes and check names are the same in every case, so
	// the kubelet and load balancers read the same answer. Logs always carry
	// the detail, redacted of credentials. See docs/security.md.
	// Env: CHECK_DETAILS ("auto", "show" or "hide", any case).
	CheckDetails string

	// PreStop serves GET /prestop, a preStop hook over HTTP: it starts the
	// shutdown sequence exactly as SIGTERM does and answers 200 when the
	// lame-duck window has passed. Env: PRESTOP ("true"/"false"). Default
	// false. Setting PreStopToken or PreStopTokenFile turns it on too.
	//
	// On a listener that also serves the application (ProbeAddr unset), a
	// token is required: enabling the hook there without PreStopToken or
	// PreStopTokenFile is an error from New, because anyone who reaches the
	// port (through an Ingress, from the internet) could otherwise drain
	// every replica. With ProbeAddr set, the hook is served on the probe
	// listener only, and needs no token unless one is set.
	PreStop bool
	// PreStopToken, when set, is required in the X-Lameduck-Token header of
	// GET /prestop; a request without it, or with a wrong one, gets 401 and
	// drains nothing. It is compared in constant time (of its SHA-256
	// digest, so not even its length leaks) and never logged. It must be
	// printable ASCII without surrounding spaces (what an HTTP header can
	// carry); Run warns when it is shorter than 16 characters.
	// Env: PRESTOP_TOKEN.
	PreStopToken string
	// PreStopTokenFile names a file holding PreStopToken, such as a
	// Kubernetes Secret mounted as a volume; it is read once, by New, and a
	// trailing newline is dropped. A file that cannot be read or is empty is
	// an error from New; setting both PreStopToken and PreStopTokenFile is
	// too. Env: PRESTOP_TOKEN_FILE.
	PreStopTokenFile string
	// Maintenance serves the maintenance switch: POST /maintenance/on takes
	// the pod out of rotation (readiness answers 503 "maintenance", checks
	// not run) without draining anything, POST /maintenance/off brings it
	// back, GET /maintenance says which; /healthz is never affected
	// (docs/probes-and-shutdown.md, "The maintenance switch"). It follows
	// PreStop's rules: with PreStopToken set, every call needs it in the
	// X-Lameduck-Token header (401 otherwise); without a token it is served
	// on the ProbeAddr listener only, and New refuses it when ProbeAddr is
	// unset too. Default false. Env: MAINTENANCE.
	Maintenance bool
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
	// ProbeListenerHandler, when set, answers every request to the
	// ProbeAddr listener whose path is not a probe's (/healthz, /readyz,
	// /readyz/<check>, /startupz, /prestop when enabled): a Prometheus
	// handler on /metrics, say, so that the metrics port carries both. When
	// nil such requests get 404. It is not tracked as an application
	// request, and it closes with the probe listener, after the
	// application's servers have drained.
	ProbeListenerHandler http.Handler

	// LivenessPaths are the paths that answer the liveness probe. Default
	// "/healthz" and "/livez" (the Kubernetes API server answers both). Set
	// them, with ReadinessPath, StartupPath and PreStopPath, for a service
	// that already owns one of these paths. Each path begins with "/", is
	// clean (no "//", "..", trailing "/", query or space), and no two probe
	// paths are the same or fall under ReadinessPath + "/".
	// Env: LIVENESS_PATHS (comma-separated, such as "/-/healthz,/-/livez").
	LivenessPaths []string
	// ReadinessPath answers the readiness probe; ReadinessPath + "/<check>"
	// answers for one check. Default "/readyz". Env: READINESS_PATH.
	ReadinessPath string
	// StartupPath answers the startup probe. Default "/startupz".
	// Env: STARTUP_PATH.
	StartupPath string
	// PreStopPath serves the preStop hook when PreStop is on. Default
	// "/prestop". Env: PRESTOP_PATH.
	PreStopPath string

	// Version and Commit are written into every probe body. Default: read
	// from the binary's build information (health.BuildInfo).
	Version, Commit string
	// Fields, when set, adds members to every probe body (such as
	// {"mode":"cloud"}); it is called once per probe, concurrently.
	Fields func() map[string]any
	// Logger receives one line per phase change. Nil means slog.Default()
	// at the time of each line (not at New): a Lifecycle made before main
	// calls slog.SetDefault logs through the handler set then. The resolved
	// Config holds a Logger that does so.
	Logger *slog.Logger
	// Clock is the source of time for the window, the budget and request
	// ages. Default: the system clock. Tests inject lameducktest.Clock.
	Clock Clock
	// IgnoreSignals stops Run from listening for signals at all; the
	// sequence then starts only through BeginShutdown, GET /prestop, Run's
	// context or a fatal error (embedding, tests). By default SIGTERM (what
	// the kubelet sends) and SIGINT (Ctrl-C) start it; to start it on
	// another signal, pass it to signal.Notify and call BeginShutdown.
	IgnoreSignals bool

	// Extension is set by package worker; nil for a server. Its type is
	// internal to this module: other modules cannot build one.
	Extension *extend.Extension
}

// window returns the resolved lame-duck window (NoDelay becomes 0).
func (c *Config) window() time.Duration { return max(c.ShutdownDelay, 0) }

// maxWindow returns the longest the lame-duck window can last: the delay, or
// the idle drain's bound, or an extension's (a runner's drain bound).
func (c *Config) maxWindow() time.Duration {
	return grace.LongestWindow(c.ShutdownDelay, c.DrainTimeout, c.DrainMode == DrainIdle || c.windowName() != "")
}
