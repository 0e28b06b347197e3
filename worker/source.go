package worker

import (
	"context"
	"errors"
	"time"
)

// Source is the queue a consume loop takes its jobs from: a JetStream pull
// consumer, an SQS queue, a database table polled with SKIP LOCKED.
//
// Implementations must be safe for use by one loop at a time; a Source
// given to several loops must be safe for concurrent use.
type Source interface {
	// Fetch waits up to wait for the next job and returns it, or (nil, nil)
	// when none came within wait and the queue said so (a JetStream pull
	// request's expiry, or its idle heartbeats): one idle cycle of the
	// loop. ctx is cancelled when the runner begins to drain; Fetch should
	// then return at once (a job it returns anyway is handed back
	// untouched). An error counts as a cycle too (the loop is alive; the
	// queue is not): it is logged when the loop starts or stops failing,
	// and the loop tries again after min(wait, 1s). An error wrapping
	// [ErrNoReply] does not: the server went silent, and a loop that only
	// gets silence fails liveness after its stall threshold.
	Fetch(ctx context.Context, wait time.Duration) (Job, error)
}

// ErrNoReply is what a Source's Fetch wraps when the fetch ended in
// silence: the queue server delivered no job, did not end the request, and
// sent no heartbeat (a connection that stopped carrying anything, a server
// that stopped answering). Such a fetch is a failed cycle, not an idle one:
// it does not keep liveness at 200, so a loop whose fetches all end in
// silence turns /healthz 503 stalled after max(2m, 20 × its fetch wait),
// and the restart gets a new connection (docs/runners.md, "Liveness").
var ErrNoReply = errors.New("worker: no reply from the queue server")

// Job is one delivered job. The loop calls exactly one of Ack and HandBack,
// once, after the handler has returned (or without running it, when the
// job must go back).
type Job interface {
	// ID names the job in logs. It may be empty (the loop then names the
	// job <loop>#<n>, n its delivery's number); whether a job is in flight
	// never depends on it. A panic is recovered as an empty ID.
	ID() string
	// Ack tells the queue the job is done: it is not delivered again.
	Ack(ctx context.Context) error
	// HandBack returns the job to the queue to be delivered again after
	// delay (zero: at once), to this runner or another: a NAK with delay.
	// It should return only once the queue has the job back, so that a
	// process exiting next cannot strand it. [HandBackCause](ctx) says why:
	// nil for the job's own failure (which should count against the
	// queue's delivery limit), the runner's reason otherwise, after which
	// the job must stay deliverable even at its last delivery.
	HandBack(ctx context.Context, delay time.Duration) error
}
