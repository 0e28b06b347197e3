package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/lameduck/lameduck/worker"
)

// Harness is the queue under test, as the suite drives it: the functions a
// Source's test writes once against its own queue server. Run never calls
// two of them at once, but calls Publish, Count, NewSource and Restart
// while runners consume through the Sources NewSource made. Each call gets
// a context bounded by 60s (Reset, Publish, Restart) or 20s (the others)
// and is waited for a second longer: one that ignores its context fails the
// scenario, named, and is left behind. A panic fails the scenario too.
type Harness struct {
	// Name names the queue in the verdict table and in failures: "nats",
	// "amqp", "postgres". Required.
	Name string
	// Addr is the queue server's host:port. The suite starts a [Relay] to it
	// for each scenario and gives the Sources the relay's address, so it can
	// add latency and break their connections; Publish, Count and Reset
	// reach the server their own way. Required.
	Addr string
	// Reset empties the queue and its dead letters (deletes and recreates
	// the stream, queue or table) and sets its delivery limit to maxDeliver
	// deliveries of a job (0: unlimited), after which the queue
	// dead-letters the job. It is called before each scenario, with no
	// runner alive; Count must then read 0 and 0. The queue's own
	// redelivery of a job delivered but never settled (JetStream's ack
	// wait, a lease's expiry) should be a few seconds at most: the broken
	// and restart scenarios wait for it. Required.
	Reset func(ctx context.Context, maxDeliver int) error
	// Publish enqueues one job per id, in order; the Source's Job.ID()
	// returns that id. It returns once the queue has them all (a publisher
	// confirm, a committed INSERT). Required.
	Publish func(ctx context.Context, ids []string) error
	// NewSource returns a Source connected to addr (the relay's address), as
	// a new runner would make it, given to all of the runner's loops, and a
	// func that closes its connection, called once after the runner's Run
	// has returned (and its Drainer's Drain, if any, with it). The func must
	// leave no goroutine and no connection behind. Required.
	NewSource func(ctx context.Context, addr string) (worker.Source, func(), error)
	// Count reads from the queue itself the jobs still there to be
	// delivered (ready, delayed or delivered and unacknowledged, whatever
	// consumer holds them) and those dead-lettered (their delivery limit
	// exhausted). It is called while runners consume and after they have
	// stopped. Required.
	Count func(ctx context.Context) (Counts, error)
	// Restart restarts the queue server; the server must keep its data
	// (the queue, its jobs and their delivery counts) and listen on Addr
	// again before Restart returns. Nil skips the restart scenario.
	Restart func(ctx context.Context) error
	// IgnoreGoroutines lists substrings of function names (such as
	// "nats-server/v2/server.") whose goroutines the leak check ignores.
	// The check counts every goroutine started during a scenario and still
	// running 5s after its Sources were closed, whoever started it: an
	// embedded queue server's own (a restarted one's included), or a
	// client that Publish or Count keeps open, must be listed here. Nil
	// ignores none.
	IgnoreGoroutines []string
}

// Counts is what the queue holds, as Harness.Count reads it.
type Counts struct {
	// Pending counts the jobs still to be delivered or settled: ready,
	// delayed (handed back with a delay) or delivered and not yet
	// acknowledged.
	Pending int
	// DeadLettered counts the jobs the queue gave up on: their delivery
	// limit was exhausted (the dead-letter queue, the max-deliveries
	// advisory, a row marked dead).
	DeadLettered int
	// DeadIDs, when the queue can tell, lists the ids of the dead-lettered
	// jobs; the suite then checks each one is a job whose handler always
	// fails. Nil skips that check (DeadLettered is checked alone).
	DeadIDs []string
}

// Options sizes the suite. The zero value runs every scenario at full size;
// a field left zero takes its default.
type Options struct {
	// Jobs is the number of jobs per backlog scenario. Default 1000; 200
	// when Short. The other scenarios publish a fifth or a tenth of it (at
	// least 10; the trickle at most 100).
	Jobs int
	// Drains is the number of runner drains per drain scenario: each drains
	// one runner while it holds jobs and starts a fresh one with a fresh
	// Source. Default 20; 6 when Short.
	Drains int
	// Loops is the number of consume loops per runner, all on the runner's
	// one Source. Default 4.
	Loops int
	// Runners is the number of runners alive at once. Default 2.
	Runners int
	// Latency, a time.Duration, is added to each direction between the
	// Sources and the queue server by the relay (0: none). Scenario names
	// in the verdict table then carry it.
	Latency time.Duration
	// FetchWait, a time.Duration, is each loop's fetch wait. Default
	// max(250ms, 5 × Latency).
	FetchWait time.Duration
	// Wait, a time.Duration, bounds how long a scenario waits, after its
	// last drain, for every job to be done and the queue to be empty.
	// Default 90s. A wait that sees the queue empty, nothing in flight and
	// no progress for a few fetch waits ends early: what is missing then
	// will not come.
	Wait time.Duration
	// Scenarios, when not empty, runs only the scenarios so named (see
	// [Run]); an unknown name fails the test.
	Scenarios []string
	// Seed seeds the choice of failing jobs and the handlers' durations;
	// 0 picks one, which Run logs so a failure can be replayed.
	Seed uint64
	// Short runs the short sizes; testing.Short() does too.
	Short bool
}

// resolved returns o with its defaults filled.
func (o Options) resolved() Options {
	short := o.Short || (testing.Testing() && testing.Short())
	o.Short = short
	if o.Jobs <= 0 {
		o.Jobs = 1000
		if short {
			o.Jobs = 200
		}
	}
	if o.Drains <= 0 {
		o.Drains = 20
		if short {
			o.Drains = 6
		}
	}
	if o.Loops <= 0 {
		o.Loops = 4
	}
	if o.Runners <= 0 {
		o.Runners = 2
	}
	if o.Latency < 0 {
		o.Latency = 0
	}
	if o.FetchWait <= 0 {
		o.FetchWait = max(250*time.Millisecond, 5*o.Latency)
	}
	if o.Wait <= 0 {
		o.Wait = 90 * time.Second
	}
	return o
}
