package worker

import (
	"context"
	"time"
)

// Source is the queue a consume loop takes its jobs from: a JetStream pull
// consumer, an SQS queue, a database table polled with SKIP LOCKED.
//
// Implementations must be safe for use by one loop at a time; a Source
// given to several loops must be safe for concurrent use.
type Source interface {
	// Fetch waits up to wait for the next job and returns it, or (nil, nil)
	// when none came within wait: one idle cycle of the loop. ctx is
	// cancelled when the runner begins to drain; Fetch should then return
	// at once (a job it returns anyway is handed back untouched). An error
	// counts as a cycle too (the loop is alive; the queue is not): it is
	// logged when the loop starts or stops failing, and the loop tries
	// again after min(wait, 1s).
	Fetch(ctx context.Context, wait time.Duration) (Job, error)
}

// Job is one delivered job. The loop calls exactly one of Ack and HandBack,
// once, after the handler has returned (or without running it, when the
// job must go back).
type Job interface {
	// ID names the job in logs.
	ID() string
	// Ack tells the queue the job is done: it is not delivered again.
	Ack(ctx context.Context) error
	// HandBack returns the job to the queue to be delivered again after
	// delay (zero: at once), to this runner or another: a NAK with delay.
	HandBack(ctx context.Context, delay time.Duration) error
}
