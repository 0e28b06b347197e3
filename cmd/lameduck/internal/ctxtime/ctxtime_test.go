package ctxtime

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Sleep returns nil after the whole d, and ctx's error as soon as ctx ends
// first; a zero or negative d is over at once. Times are the bubble's.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(t.Context(), 3*time.Second); err != nil || time.Since(start) != 3*time.Second {
			t.Errorf("Sleep(3s) = %v after %v, want nil after 3s", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if err := Sleep(ctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("Sleep(1m) under a 1s context = %v after %v, want DeadlineExceeded after 1s", err, time.Since(start))
		}
		start = time.Now()
		if err := Sleep(t.Context(), -time.Second); err != nil || time.Since(start) != 0 {
			t.Errorf("Sleep(-1s) = %v after %v, want nil at once", err, time.Since(start))
		}
	})
}
