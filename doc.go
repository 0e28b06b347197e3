// Package lameduck makes a Go service behave in Kubernetes: its liveness,
// readiness and startup probes tell the truth, and when the pod is asked to
// leave it drains without dropping a request.
//
// A [Lifecycle] owns the service's HTTP servers. [Lifecycle.Run] binds them,
// serves /healthz, /readyz and /startupz on them as soon as they are bound,
// runs the startup tasks, and on SIGTERM runs the shutdown sequence of the
// platform guide this project follows (seed 004): readiness 503 at once, a
// lame-duck window while the service keeps serving so that endpoint removal
// can propagate, then a teardown that drains in-flight requests under a
// budget and names what it had to cut. The whole sequence fits
// Config.ShutdownDelay + Config.ShutdownTeardown, which an operator adds up
// against terminationGracePeriodSeconds.
//
// Settings come from [Config] and, for what the code leaves unset, from
// LAMEDUCK_* environment variables, strictly parsed.
//
// The package imports only the standard library. Its sibling package health
// renders probe answers; lameducktest provides a fake clock for tests.
package lameduck
