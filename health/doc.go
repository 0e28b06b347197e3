// Package health checks a process's dependencies and renders Kubernetes
// probe answers: liveness (/healthz), readiness (/readyz) and startup
// (/startupz).
//
// It knows nothing of signals, servers or shutdown; the lameduck package
// decides what phase the process is in and this package runs the checks and
// writes the answer the way the kubelet, load balancers and operators
// expect.
//
// # Checks and gates
//
// A [Checker] holds the readiness checks ([Check]: a name, a function of a
// context, a criticality, a deadline) and gates ([Gate]: a predicate over
// in-memory state). [Checker.Run] probes them (docs/probes-and-shutdown.md,
// "Readiness checks"):
//
//   - concurrently, each under its own deadline, so a probe answers in
//     max(ping), not sum(ping);
//   - a failing critical check or gate answers 503 "failed"; a failing
//     non-critical check 200 "degraded", so a dependency every replica
//     shares cannot take every pod out of the Service at once;
//   - overlapping probes share one in-flight ping per check, and read the
//     same answer;
//   - a ping that ignores its deadline is reported "timeout" at it, then
//     "stalled" without being launched again until it returns: at most one
//     goroutine per check is ever captive;
//   - a panicking check is recovered, reported "panic: <value>" and handed
//     to an error-tracker hook; the process lives;
//   - nothing is cached unless a check sets a MaxAge: every result comes
//     from a ping that ran during the probe, or, with MaxAge, from one that
//     answered less than MaxAge before it (never while a ping is in flight),
//     so a dependency sees one ping per MaxAge whatever the number of
//     probers; [Checker.RunRefresh] can keep such results fresh on its own
//     schedule;
//   - error text is redacted of credentials ([Redact]) before it reaches a
//     body, or hidden entirely: for every probe (CheckerOptions.HideDetails)
//     or per handler, for a port the internet can reach (Info.HideDetails).
//
// # Responses
//
// Every probe response (docs/probes-and-shutdown.md, "The endpoints"; the
// Kubernetes API server's conventions,
// https://kubernetes.io/docs/reference/using-api/health-checks/):
//
//   - answers GET and HEAD only; any other method is a 405 with an Allow
//     header;
//   - carries Cache-Control: no-store and, as JSON, an envelope with status,
//     version and commit, so a probe response also tells which build
//     answered;
//   - for readiness ([Checker.ServeReadiness], [WriteNegotiated]) honours
//     /readyz/<name>, ?exclude=<name>, ?verbose (plain text) and Accept:
//     application/health+json (draft-inadarei-api-health-check).
//
// The package imports only the standard library, keeps no package-level
// mutable state and starts no goroutine except one per ping.
package health
