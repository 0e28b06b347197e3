package lameduck_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck"
)

// Requests that still arrive in the last second of the lame-duck window
// are named in one log line, with how many and how long after the signal
// the last came, and what it means: the router in front did not take the
// terminating pod out. Requests earlier in the window, or in a window too
// short to judge (2s or less), log nothing. Times are the bubble's.
func TestLateArrivalsNameTheRouter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    lameduck.Config
		at     []time.Duration // arrivals, after the signal
		want   string          // "" for no line
		wantAt string
	}{
		{"delay, late", lameduck.Config{ShutdownDelay: 5 * time.Second}, []time.Duration{time.Second, 4500 * time.Millisecond, 4600 * time.Millisecond, 4900 * time.Millisecond},
			"lameduck: 3 request(s) arrived in the last second of the lame-duck window, 4s or more after the shutdown signal (the last 4.9s after it): the routing layer in front kept sending to the pod after it began terminating", "late_requests=3"},
		{"delay, early only", lameduck.Config{ShutdownDelay: 5 * time.Second}, []time.Duration{time.Second, 3900 * time.Millisecond}, "", ""},
		{"short window", lameduck.Config{ShutdownDelay: 2 * time.Second}, []time.Duration{1900 * time.Millisecond}, "", ""},
		{"idle bound", lameduck.Config{ShutdownDelay: time.Second, DrainMode: lameduck.DrainIdle, IdleWindow: time.Second, DrainTimeout: 4 * time.Second},
			[]time.Duration{500 * time.Millisecond, 1200 * time.Millisecond, 1900 * time.Millisecond, 2600 * time.Millisecond, 3300 * time.Millisecond, 3800 * time.Millisecond},
			"lameduck: 2 request(s) arrived in the last second before the idle drain's bound, 3s or more after the shutdown signal (the last 3.8s after it)", "last_after_signal=3.8s"},
		{"idle, went idle", lameduck.Config{ShutdownDelay: time.Second, DrainMode: lameduck.DrainIdle, IdleWindow: time.Second, DrainTimeout: 4 * time.Second},
			[]time.Duration{500 * time.Millisecond}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := tc.cfg
				cfg.ShutdownTeardown = 5 * time.Second
				lc, logs := newLifecycle(t, cfg)
				addFakeServer(t, lc)
				done := make(chan error, 1)
				go func() { done <- lc.Run(context.Background()) }()
				<-lc.Events().StartupDone.Done()
				lc.BeginShutdown("test")
				synctest.Wait()
				start := time.Now()
				for _, at := range tc.at {
					time.Sleep(start.Add(at).Sub(time.Now()))
					tr, v := lc.TrackRequest("GET", "/work", false)
					if v.Refuse != "" || v.Probe {
						t.Fatalf("request at %s refused: %+v", at, v)
					}
					tr.End()
				}
				if err := <-done; err != nil {
					t.Fatalf("Run = %v", err)
				}
				got := logs.String()
				if tc.want == "" {
					if strings.Contains(got, "arrived in the last second") {
						t.Errorf("a late-arrival line with no late request:\n%s", got)
					}
				} else if !strings.Contains(got, tc.want) || !strings.Contains(got, tc.wantAt) {
					t.Errorf("the log lacks %q and %q:\n%s", tc.want, tc.wantAt, got)
				}
			})
		})
	}
}
