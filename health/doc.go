// Package health renders Kubernetes probe answers: liveness (/healthz),
// readiness (/readyz) and startup (/startupz).
//
// It knows nothing of signals, servers or shutdown; the lameduck package
// decides what a probe should say and this package writes it the way the
// kubelet, load balancers and operators expect (the platform guide, seed 004,
// "The four endpoints"):
//
//   - GET and HEAD only; any other method is a 405 with an Allow header;
//   - Content-Type: application/json and Cache-Control: no-store;
//   - a JSON envelope that always carries status, version and commit, so a
//     probe response also tells which build answered.
//
// The package imports only the standard library.
package health
