package testsupport

import (
	"context"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

// Steps are the durations of the shutdown scenario RunTimedSteps plays, in
// which every step takes a known time.
type Steps struct {
	Startup time.Duration // the one startup task's sleep; 0 for no task
	Serving time.Duration // from StartupDone to BeginShutdown
	Window  time.Duration // the Lifecycle's ShutdownDelay, which the caller sets
	Hooks   time.Duration // the one teardown hook's sleep
	Drain   time.Duration // the server's Shutdown; the hooks run beside it
	Join    time.Duration // the background write ends this long after the drain
	Closers time.Duration // the one closer's sleep
}

// TimedSteps is the scenario the step-timing tests play (the events' times
// in the root package, the step gauges in contrib/prometheus): a 1s boot,
// 2s serving, a 5s window, a teardown hook that sleeps 2s beside a server
// whose Shutdown sleeps 4s, a background write that ends 1s after the HTTP
// drain, and a closer that sleeps 500ms.
func TimedSteps() Steps {
	return Steps{
		Startup: 1 * time.Second,
		Serving: 2 * time.Second,
		Window:  5 * time.Second,
		Hooks:   2 * time.Second,
		Drain:   4 * time.Second,
		Join:    1 * time.Second,
		Closers: 500 * time.Millisecond,
	}
}

// Total is the sequence's length, from ShutdownInitiated to Stopped: the
// window, the drain (the hooks end within it), the join and the closers.
func (s Steps) Total() time.Duration { return s.Window + s.Drain + s.Join + s.Closers }

// RunTimedSteps registers on lc a startup task (when s.Startup is not 0),
// a teardown hook, a closer and a server (SlowServer on a ChanListener)
// whose steps take s's durations, and runs lc. Serving after StartupDone it
// starts a background write that ends Join after the HTTP drain, and
// begins the shutdown. It returns the time just before Run started, and
// fails t unless every registration succeeds and Run returns nil. Call it
// inside a testing/synctest bubble, where time.Sleep is exact, on a
// Lifecycle whose ShutdownDelay is s.Window and whose teardown has room
// for the steps.
func RunTimedSteps(t testing.TB, lc *lameduck.Lifecycle, s Steps) (began time.Time) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	sleep := func(d time.Duration) func(context.Context) error {
		return func(context.Context) error { time.Sleep(d); return nil }
	}
	if s.Startup != 0 {
		must(lc.AddStartupTask("boot", sleep(s.Startup)))
	}
	must(lc.AddTeardownHook("release", sleep(s.Hooks)))
	must(lc.AddCloser("pool", sleep(s.Closers)))
	must(lc.AddServerFuncs(SlowServer(s.Drain), NewChanListener()))

	began = time.Now()
	done := make(chan error, 1)
	go func() { done <- lc.Run(context.Background()) }()
	<-lc.Events().StartupDone.Done()
	time.Sleep(s.Serving)
	// A write that outlives the HTTP drain by Join: started now, it ends
	// Window + Drain + Join from now.
	must(lc.GoWrite("audit", time.Minute, sleep(s.Window+s.Drain+s.Join)))
	lc.BeginShutdown("test")
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	return began
}
