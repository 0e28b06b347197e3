package health_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
)

// "Set it per check (health.Check.MaxAge) or for every check that sets none
// (CheckerOptions.DefaultMaxAge …); a negative MaxAge on one check opts it
// out of the default" (docs/probes-and-shutdown.md): with a default of one
// hour, the check that opts out is pinged by every probe, the other once.
func TestNegativeMaxAgeOptsOutOfTheDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet(), DefaultMaxAge: time.Hour})
		var shared, local atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", Func: func(context.Context) error { shared.Add(1); return nil }})
		mustAdd(t, c, health.Check{Name: "sidecar", MaxAge: -1, Func: func(context.Context) error { local.Add(1); return nil }})
		const probes = 5
		for range probes {
			if _, err := c.Run(context.Background(), "", nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		if n := local.Load(); n != probes {
			t.Errorf("the check with MaxAge -1 was pinged %d times by %d probes; want every probe (opted out of the default)", n, probes)
		}
		if n := shared.Load(); n != 1 {
			t.Errorf("the check under the 1h default was pinged %d times by %d probes a second apart; want 1", n, probes)
		}
	})
}
