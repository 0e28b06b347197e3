// Package lameduck makes a Go service behave in Kubernetes: its liveness,
// readiness and startup probes tell the truth, and when the pod is asked to
// leave it drains without dropping a request.
//
// A [Lifecycle], made by [New] from a [Config] (and LAMEDUCK_* variables for
// what the code leaves unset, strictly parsed), owns the service's servers.
// [Lifecycle.Run] binds them, answers /healthz, /readyz and /startupz on
// them, runs the startup tasks, and on SIGTERM runs the shutdown sequence,
// whose timeline [Events] defines: readiness 503 at once, the window, then
// the teardown. A server that is not an *http.Server joins through
// [Lifecycle.AddServerFuncs] and [Lifecycle.TrackRequest]. The package
// imports only the standard library; the operator's guide is
// docs/probes-and-shutdown.md.
//
// # Glossary
//
//   - lame duck: a pod that has been told to leave and still serves, while
//     the routing layer learns that it is leaving; /readyz answers 503.
//   - window (the lame-duck window): from the signal to the teardown; fixed
//     (ShutdownDelay) or until traffic is idle (DrainIdle); none for a pod
//     that never became ready.
//   - drain: letting what is in flight finish instead of cutting it. It
//     spans the phase draining (/readyz "draining": the window) and the
//     HTTP drain inside the teardown, which waits for handlers. DrainMode
//     (LAMEDUCK_DRAIN_MODE) says how the window ends: after a delay, or
//     when traffic has been quiet for IdleWindow (idle), at most
//     DrainTimeout.
//   - teardown: everything after the window, under one budget
//     (ShutdownTeardown): the teardown hooks (AddTeardownHook, the
//     application's own steps) beside the HTTP drain, then the join, then
//     the closers. [Events].WindowEnded fires when it begins.
//   - join: the teardown's wait for background tasks (GoWrite, GoLoop);
//     what still runs at its bound is abandoned, and named.
//
// # Files
//
//	lifecycle.go     Lifecycle, New, Run, BeginShutdown
//	servers.go       AddServer: binding and serving the registered servers
//	events.go        Event, Events: the shutdown timeline, one event per step
//	errors.go        the sentinel errors: ErrStartupFailed, ErrShuttingDown
//	config.go        Config and its defaults; settings.go the LAMEDUCK_* rows, ConfigError
//	resolve.go       Resolve, Resolved: the rows walked, then the named cross-setting checks
//	extension.go     Config.Extension: what a package built on the Lifecycle adds (internal/extend)
//	budget.go        the shutdown budget line of Run's start (arithmetic in internal/grace, which lameduck vet shares)
//	phase.go         Phase and what the probes answer in each
//	probes.go        the probe handlers and GET /prestop; probeconfig.go their settings
//	maintenance.go   the maintenance switch: /readyz 503 "maintenance" on demand, no drain
//	checks.go        AddCheck, AddGate: readiness checks (engine in package health)
//	startup.go       AddStartupTask, Retry: startup tasks, tried again, and the boot
//	window.go        the lame-duck window, delay and idle modes
//	late.go          the log line naming a router still sending at the window's end
//	connage.go       MaxConnectionAge: Connection: close (HTTP/2 GOAWAY) on old connections
//	teardown.go      the teardown: hooks beside the HTTP drain, join, closers
//	hooks.go         AddTeardownHook, AddCloser
//	background.go    GoWrite, GoLoop and the join
//	middleware.go    the handler wrapper, TrackRequest, Tracked, KeepAlive
//	track.go         request tracking (allocation-free), InFlight, InFlightRequest
//	serverfuncs.go   ServerFuncs, AddServerFuncs: servers that are not net/http's
//	transition.go    Transition, Config.OnTransition: events, checks, probes, cuts
//	clock.go         Clock, Timer: the injected time source
//	inflight.go      the in_flight count of the sequence's log lines
//	signals.go       the signal handler: what each signal does, its name, its exit code
//	logger.go, servicelinks.go   the default logger, the kubelet's service links
//
// Longer material lives in docs/: probes-and-shutdown.md (the operator's
// guide), deploying.md, runners.md, security.md, frameworks.md, and
// promises.md (every claim with the test that holds it). Sibling packages:
// health (the check engine and probe bodies), checks (ready-made stdlib
// checks), worker (runners), lameducktest (a fake clock to test a drain).
package lameduck
