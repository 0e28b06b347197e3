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
//     (LAMEDUCK_DRAIN_MODE) says how the window ends: after a delay, when
//     traffic has been quiet for IdleWindow (idle), or for a runner when its
//     jobs end (complete) or at once with its jobs handed back (interrupt);
//     DrainTimeout bounds the idle and runner windows.
//   - teardown: everything after the window, under one budget
//     (ShutdownTeardown): the teardown hooks (AddTeardownHook, the
//     application's own steps) beside the HTTP drain, then the join, then
//     the closers. [Lifecycle.WindowEnded] closes when it begins.
//   - join: the teardown's wait for background tasks (GoWrite, GoLoop);
//     what still runs at its bound is abandoned, and named.
//   - runner: a process that consumes jobs from a queue instead of serving
//     requests (package worker, which owns its settings and drain modes);
//     its window lasts until its jobs in flight end.
//   - hand-back: a runner returning an unfinished job to its queue, for
//     another replica to run (drain mode interrupt, or a job cut at
//     DrainTimeout).
//
// # Files
//
//	lifecycle.go     Lifecycle, New, AddServer, AddStartupTask, Run, BeginShutdown
//	events.go        Event, Events: the shutdown timeline, one event per step
//	config.go        Config and its defaults; settings.go the LAMEDUCK_* rows, ConfigError
//	resolve.go       resolution: the rows walked, then the named cross-setting checks
//	extension.go     how package worker attaches a runner's settings and hooks (unexported)
//	budget.go        Resolve, Budget: the grace-period arithmetic (lameduck vet shares it)
//	phase.go         Phase and what the probes answer in each
//	probes.go        the probe handlers and GET /prestop; probeconfig.go their settings
//	maintenance.go   the maintenance switch: /readyz 503 "maintenance" on demand, no drain
//	checks.go        AddCheck, AddGate: readiness checks (engine in package health)
//	startup.go       Retry: startup tasks tried again
//	window.go        the lame-duck window, delay and idle modes
//	late.go          the log line naming a router still sending at the window's end
//	connage.go       MaxConnectionAge: Connection: close (HTTP/2 GOAWAY) on old connections
//	teardown.go      the teardown: hooks beside the HTTP drain, join, closers
//	hooks.go         AddTeardownHook, AddCloser
//	background.go    GoWrite, GoLoop and the join
//	middleware.go    the handler wrapper, TrackRequest, Tracked, WindowEnded, KeepAlive
//	track.go         request tracking (allocation-free), InFlightRequest
//	serverfuncs.go   ServerFuncs, AddServerFuncs: servers that are not net/http's
//	transition.go    Transition, Config.OnTransition: events, checks, probes, cuts
//	clock.go         Clock, Timer: the injected time source
//	inflight.go      the in_flight count of the sequence's log lines
//	signals.go, logger.go, servicelinks.go   signal names, the default logger, the kubelet's service links
//
// Longer material lives in docs/: probes-and-shutdown.md (the operator's
// guide), deploying.md, runners.md, security.md, frameworks.md, and
// promises.md (every claim with the test that holds it). Sibling packages:
// health (the check engine and probe bodies), checks (ready-made stdlib
// checks), worker (runners), lameducktest (a fake clock to test a drain).
package lameduck
