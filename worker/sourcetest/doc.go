// Package sourcetest is the conformance suite every worker.Source passes:
// it runs real workers (package worker) on the queue under test, drains
// them over and over while they hold jobs, fails, panics, supersedes,
// cuts and restarts them, and counts every job, from the queue itself and
// from the handlers' own records. A Source that passes loses no job in a
// drain and never makes a runner's own hand-back spend a job's last
// delivery (docs/runners.md, "Writing a source").
//
// A Source's test describes its queue once, as a [Harness], and calls
// [Run]:
//
//	func TestConformance(t *testing.T) {
//		sourcetest.Run(t, sourcetest.Harness{
//			Name: "nats", Addr: addr,
//			Reset: reset, Publish: publish, NewSource: newSource, Count: count,
//		}, sourcetest.Options{Short: testing.Short()})
//	}
//
// and again with Options.Latency set (100ms, say) to run the scenarios
// over a slow link. [Relay] is the TCP relay the suite puts between the
// Sources and the server; a Source's own tests may use it too.
//
// The package imports only the standard library and lameduck (testing is
// part of the former); it starts no goroutine outside Run and a Relay.
package sourcetest
