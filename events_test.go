package lameduck_test

import (
	"context"
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
		lc, _ := newLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 30 * time.Second})
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		const (
			startup = 1 * time.Second
			serving = 2 * time.Second // from StartupDone to BeginShutdown
			window  = 5 * time.Second
			hooks   = 2 * time.Second // the one hook's sleep
			drain   = 4 * time.Second // the server's Shutdown; the hooks run beside it
			join    = 1 * time.Second // the write ends this long after the drain
			closers = 500 * time.Millisecond
		)
		must(lc.AddStartupTask("boot", func(context.Context) error { time.Sleep(startup); return nil }))
		must(lc.AddTeardownHook("release", func(context.Context) error { time.Sleep(hooks); return nil }))
		must(lc.AddCloser("pool", func(context.Context) error { time.Sleep(closers); return nil }))
		ln := testsupport.NewChanListener()
		must(lc.AddServerFuncs(testsupport.SlowServer(drain), ln))

		began := time.Now()
		done := make(chan error, 1)
		go func() { done <- lc.Run(context.Background()) }()
		ev := lc.Events()
		<-ev.StartupDone.Done()
		time.Sleep(serving)
		// A write that outlives the HTTP drain by join: started now, it
		// ends window + drain + join from now.
		must(lc.GoWrite("audit", time.Minute, func(context.Context) error {
			time.Sleep(window + drain + join)
			return nil
		}))
		lc.BeginShutdown("test")
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}

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
			{"startup (Run to StartupDone)", began, at(ev.StartupDone), startup},
			{"serving (StartupDone to ShutdownInitiated)", at(ev.StartupDone), at(ev.ShutdownInitiated), serving},
			{"window (ShutdownInitiated to WindowEnded)", at(ev.ShutdownInitiated), at(ev.WindowEnded), window},
			{"hooks (WindowEnded to HooksDone)", at(ev.WindowEnded), at(ev.HooksDone), hooks},
			{"HTTP drain (WindowEnded to HTTPDrained)", at(ev.WindowEnded), at(ev.HTTPDrained), drain},
			{"join (the later of HooksDone and HTTPDrained, to Joined)", later(at(ev.HooksDone), at(ev.HTTPDrained)), at(ev.Joined), join},
			{"closers (Joined to Stopped)", at(ev.Joined), at(ev.Stopped), closers},
			{"total (ShutdownInitiated to Stopped)", at(ev.ShutdownInitiated), at(ev.Stopped), window + drain + join + closers},
		} {
			if got := step.to.Sub(step.from); got != step.want {
				t.Errorf("%s took %s by the events, want %s", step.name, got, step.want)
			}
		}
	})
}
