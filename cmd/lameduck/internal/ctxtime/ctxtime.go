// Package ctxtime holds the one context-bound wait the lameduck binary's
// commands share (the demo's slow routes and checks, the rollout
// simulator's warm-up and cool-down).
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, and returns nil when d passed first or
// ctx's error when ctx ended first. A zero or negative d is over at once.
// Safe for concurrent use.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
