package lameduck_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// Each event's time is the moment its step ended, read from the
// Lifecycle's clock when the event fired: a run whose every step takes a
// known time (in a synctest bubble, where time.Sleep is exact) reads each
// step's duration back from the events, as contrib/prometheus does for its
// step gauges. Before the fix, HooksDone's time was read when its defer
// was set up, at the start of the hooks: hooks 0s instead of 2s, and the
// join measured from there.
func TestEventsTellEachStepsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := testsupport.TimedSteps()
		lc, _ := newLifecycle(t, lameduck.Config{ShutdownDelay: st.Window, ShutdownTeardown: 30 * time.Second})
		began := testsupport.RunTimedSteps(t, lc, st)
		ev := lc.Events()

		at := func(e *lameduck.Event) time.Time {
			t.Helper()
			ts, ok := e.At()
			if !ok {
				t.Fatalf("%s never fired", e.Name())
			}
			return ts
		}
		later := func(a, b time.Time) time.Time {
			if a.After(b) {
				return a
			}
			return b
		}
		for _, step := range []struct {
			name     string
			from, to time.Time
			want     time.Duration
		}{
			{"startup (Run to StartupDone)", began, at(ev.StartupDone), st.Startup},
			{"serving (StartupDone to ShutdownInitiated)", at(ev.StartupDone), at(ev.ShutdownInitiated), st.Serving},
			{"window (ShutdownInitiated to WindowEnded)", at(ev.ShutdownInitiated), at(ev.WindowEnded), st.Window},
			{"hooks (WindowEnded to HooksDone)", at(ev.WindowEnded), at(ev.HooksDone), st.Hooks},
			{"HTTP drain (WindowEnded to HTTPDrained)", at(ev.WindowEnded), at(ev.HTTPDrained), st.Drain},
			{"join (the later of HooksDone and HTTPDrained, to Joined)", later(at(ev.HooksDone), at(ev.HTTPDrained)), at(ev.Joined), st.Join},
			{"closers (Joined to Stopped)", at(ev.Joined), at(ev.Stopped), st.Closers},
			{"total (ShutdownInitiated to Stopped)", at(ev.ShutdownInitiated), at(ev.Stopped), st.Total()},
		} {
			if got := step.to.Sub(step.from); got != step.want {
				t.Errorf("%s took %s by the events, want %s", step.name, got, step.want)
			}
		}
	})
}
