package ldamqp

import (
	"context"
	"time"
)

// HandBackFor hands j back with cause as the runner's reason (nil: the
// job's failure), as the worker's loop does through worker.HandBackCause,
// whose context only the worker package can make.
func HandBackFor(j *Job, ctx context.Context, delay time.Duration, cause error) error {
	return j.handBack(ctx, delay, cause)
}
