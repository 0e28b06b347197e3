// Package lameduck makes a Go service behave in Kubernetes: its liveness,
// readiness and startup probes tell the truth, and when the pod is asked to
// leave it drains without dropping a request.
//
// A [Lifecycle] owns the service's HTTP servers. [Lifecycle.Run] binds them,
// serves /healthz (and /livez), /readyz and /startupz on them as soon as
// they are bound (the paths are settings),
// runs the startup tasks, and on SIGTERM runs the shutdown sequence that
// docs/probes-and-shutdown.md ("The shutdown sequence") explains: readiness
// 503 at once, a lame-duck window while the service keeps serving so that
// endpoint removal can propagate (Kubernetes removes a terminating pod from
// its Service in parallel with SIGTERM, not before it:
// https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination;
// the window is fixed, or lasts until traffic is idle), then a teardown
// that drains in-flight requests (WebSockets included) beside the drain
// hooks, joins the background work (GoWrite, GoLoop) under one budget, runs
// the closers, and names whatever it had to cut. The whole sequence fits
// the window + Config.ShutdownTeardown, which an operator adds up against
// terminationGracePeriodSeconds.
//
// Readiness checks (AddCheck) and gates (AddGate) are critical or degraded,
// run concurrently under their own deadlines, and are never consulted once
// the pod drains: a draining pod's readiness is 503 whatever they say. The request-tracking middleware that every
// registered server goes through allocates nothing.
//
// The probes may be reachable from the internet through the application's
// own port: there, bodies name failing checks without their error text,
// and the preStop hook (GET /prestop) requires a token; docs/security.md
// has the threat model.
//
// A server that is not an *http.Server (a Fiber app, a gRPC server) joins
// the same sequence through [Lifecycle.AddServerFuncs] (how to serve it and
// stop it) and [Lifecycle.TrackRequest], which its first middleware calls
// for every request; the contrib modules fiber and grpc do both.
//
// Settings come from [Config] and, for what the code leaves unset, from
// LAMEDUCK_* environment variables, strictly parsed.
//
// The package imports only the standard library. Its sibling package health
// holds the check engine and renders probe answers; checks has ready-made
// stdlib checks; lameducktest a fake clock and helpers to test a service's
// own drain.
package lameduck
