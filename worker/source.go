package worker

import (
	"context"
	"errors"
	"time"
)

// Source is the queue a consume loop takes its jobs from: a JetStream pull
// consumer, a RabbitMQ queue, a database table claimed with SKIP LOCKED.
//
// The contract exists so that no delivery is ever abandoned: a queue cannot
// un-send a message, so every job a queue delivers to a runner must end in
// exactly one of two ways, handled and acknowledged ([Job.Ack]), or handed
// back where the queue will deliver it again ([Job.HandBack]). The runner
// keeps its side: it calls exactly one of them for every Job that Fetch
// returns, whatever happens (a drain, a handler's error or panic, the drain
// bound, a superseded epoch). A Source keeps the other side:
//
//   - Fetch asks the queue for at most one job and waits for the queue's
//     answer: the job, or the queue's own word that the request is over (a
//     JetStream pull request's expiry status, an AMQP basic.get-empty or a
//     consumer whose prefetch buffer is empty, a SELECT … FOR UPDATE SKIP
//     LOCKED that claimed no row). It returns within wait plus the
//     queue's round trip. It never returns early on its own while the queue
//     may still answer the request with a job, because that job would be
//     counted as delivered and then go nowhere.
//   - The runner does not cancel ctx to stop fetching: at the drain it
//     simply stops calling Fetch, waits for the calls under way to return,
//     and hands back unstarted any job they return ([ErrNotStarted]). A
//     Fetch that waits between claims with no request outstanding may end
//     its wait then ([Stopping]); one whose request the queue holds may
//     not. ctx
//     ends only when the process is about to exit (the end of the
//     teardown's hook share, the approach of the kubelet's SIGKILL); a
//     Fetch that returns then, or that gives up on a queue that went
//     silent ([ErrNoReply]), must itself hand back anything the queue
//     still delivers to the request it left (a late delivery is handed
//     back at once, or returned by the next Fetch), and say in its
//     [Drainer]'s Drain what it could not.
//   - A job stays the runner's until it is settled: the Source keeps the
//     queue's claim on it alive while it runs (JetStream in-progress acks,
//     an AMQP delivery held unacknowledged on its channel, a lease renewed
//     on the row), however long it runs.
//   - A Source that buffers (AMQP prefetch, a batch of rows) hands back
//     every buffered job it has not returned when its Drain is called.
//
// What a queue can still do to a job is the queue's: a process killed
// before it could hand back (SIGKILL, a lost node, a broken connection)
// leaves its job to the queue's own redelivery (the ack wait, the
// channel's close, the lease's expiry), which may count a delivery. A job
// may therefore run more than once: a runner delivers at least once, and
// a handler that must not repeat its effect makes it idempotent or
// checkpointed (docs/runners.md, "At least once").
//
// The package sourcetest is the conformance suite every Source passes; run
// it against your own (docs/runners.md, "Writing a source").
//
// Implementations must be safe for use by one loop at a time; a Source
// given to several loops must be safe for concurrent use.
type Source interface {
	// Fetch waits up to wait for the next job and returns it, or (nil, nil)
	// when none came within wait and the queue said so: one idle cycle of
	// the loop. It returns within wait plus the queue's round trip; ctx
	// ends only when the process is about to exit (see Source). An error
	// counts as a cycle too (the loop is alive; the queue is not): it is
	// logged when the loop starts or stops failing, and the loop tries
	// again after min(wait, 1s). An error wrapping [ErrNoReply] does not:
	// the server went silent, and a loop that only gets silence fails
	// liveness after its stall threshold.
	//
	// A Fetch that waits in the queue for a job may call [Consuming](ctx)
	// once the queue holds its request, so that readiness need not wait
	// for a whole idle fetch.
	Fetch(ctx context.Context, wait time.Duration) (Job, error)
}

// Drainer is an optional interface of a [Source]. Drain is called once,
// after every loop on the Source has returned, within the teardown's hook
// share (ctx ends with it). It waits until the queue can deliver nothing
// more to requests the Source made (a pull request abandoned on silence,
// until it expires at the server), hands back each job still buffered or
// delivered late, and releases the Source's claim on the queue (an AMQP
// consumer cancelled, a subscription removed). It returns nil when nothing
// can still reach the Source, or an error that says, in the queue's words,
// what it could not wait for and what the queue will do with such a job
// (redeliver it after the ack wait, say). A Source given to several
// workers is drained by each.
type Drainer interface {
	Drain(ctx context.Context) error
}

// Delivered is an optional interface of a [Job]: Delivery reports how many
// times the queue has delivered it, this delivery included (1 the first
// time): JetStream's NumDelivered, a quorum queue's x-delivery-count plus
// one, a row's attempts. The loop spaces out the redeliveries of a failing
// job with it (Config.FailureBackoff); a job that does not implement it is
// handed back after FailureBackoff each time.
type Delivered interface {
	Delivery() int
}

// ErrNoReply is what a Source's Fetch wraps when the fetch ended in
// silence: the queue server delivered no job and did not end the request
// within wait plus a generous allowance for the round trip (a connection
// that stopped carrying anything, a server that stopped answering). Such a
// fetch is a failed cycle, not an idle one: it does not keep liveness at
// 200, so a loop whose fetches all end in silence turns /healthz 503
// stalled after max(2m, 20 × its fetch wait), and the restart gets a new
// connection (docs/runners.md, "Silent fetches"). A Source that returns it
// still owns the request it gave up on (see Source).
var ErrNoReply = errors.New("worker: no reply from the queue server")

// Job is one delivered job. The loop calls exactly one of Ack and HandBack,
// once, after the handler has returned (or without running it, when the
// job must go back).
type Job interface {
	// ID names the job in logs. It may be empty (the loop then names the
	// job <loop>#<n>, n its delivery's number); whether a job is in flight
	// never depends on it. A panic is recovered as an empty ID.
	ID() string
	// Ack tells the queue the job is done: it is not delivered again. It
	// should return only once the queue has confirmed it (JetStream's
	// double ack, an AMQP ack followed by a round trip, a committed DELETE
	// or UPDATE), so that a job reported done is not delivered again.
	Ack(ctx context.Context) error
	// HandBack returns the job to the queue to be delivered again after
	// delay (zero: at once), to this runner or another: a NAK with delay.
	// It returns only once the queue has the job back, so that a process
	// exiting next cannot strand it. [HandBackCause](ctx) says why: nil
	// for the job's own failure (which should count against the queue's
	// delivery limit), the runner's reason otherwise, after which the job
	// must stay deliverable even at its last delivery. Its error says
	// what the queue will do with the job now (redeliver it after its ack
	// wait, or nothing: the job is lost), for the log.
	HandBack(ctx context.Context, delay time.Duration) error
}

type consumingKey struct{}

type stoppingKey struct{}

// Stopping returns a channel that is closed when the runner whose loop
// made ctx (the ctx given to [Source.Fetch]) stops asking for jobs: the
// drain began. For a ctx no loop made it returns nil, which blocks
// forever in a select. It is safe to call from any goroutine.
//
// It lets a Fetch end an idle wait early, and only one that holds no
// request the queue could still answer: a Source that claims rows with
// SELECT … FOR UPDATE SKIP LOCKED, or polls, waits between claims with
// nothing outstanding, and may return (nil, nil) at once when Stopping
// closes, so the drain does not wait out the rest of its FetchWait. A
// Fetch whose request the queue holds (a JetStream pull request, an AMQP
// consumer's prefetch) must still wait for the queue's answer, as
// [Source] says: returning then would abandon what the queue may yet
// deliver.
func Stopping(ctx context.Context) <-chan struct{} {
	c, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return c
}

// Consuming tells the loop whose Fetch was given ctx that the queue holds
// its request now (a JetStream pull request flushed to the server, an AMQP
// consumer registered): the loop counts as consuming, and readiness need
// not wait for the fetch to return. It does nothing for a ctx that no loop
// made. It is safe to call any number of times, from any goroutine.
func Consuming(ctx context.Context) {
	if f, ok := ctx.Value(consumingKey{}).(func()); ok {
		f()
	}
}
