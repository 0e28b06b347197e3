package lameduck

import "time"

// Clock is the source of time for everything the Lifecycle waits on: the
// lame-duck window, the teardown budget and the age of in-flight requests.
//
// Production code leaves [Config.Clock] nil and gets the system clock. Tests
// inject a fake (lameducktest.Clock) so the window's length and the budget's
// cut are exact and no test sleeps to synchronise.
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that delivers the time on its channel once,
	// d after now. A d of zero or less fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a [Clock].
type Timer interface {
	// C returns the channel on which the time is delivered once.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call
	// stopped the timer (false if it had already fired or been stopped).
	Stop() bool
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
