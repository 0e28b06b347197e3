package lameduck

import (
	"sync"
	"sync/atomic"
	"time"
)

// Event is a named one-shot signal in the Lifecycle's sequence: it fires
// once, at a recorded time, and never un-fires. Handlers and tests wait on
// exactly the event they need instead of polling the phase (the model of
// kube-apiserver's lifecycle signals, k8s.io/apiserver/pkg/server's
// lifecycle_signals.go, plus timestamps).
//
// Event's methods are safe for concurrent use. The zero value is not usable;
// a Lifecycle makes its own.
type Event struct {
	name  string
	clock Clock                   // read by stamp and fire: the event's time is when it happens
	on    func(*Event, time.Time) // the Lifecycle's report of a firing; nil for none
	ch    chan struct{}
	once  sync.Once
	at    atomic.Pointer[time.Time] // set once, when the event happens: before ch is closed
}

func newEvent(name string, clock Clock) *Event {
	return &Event{name: name, clock: clock, ch: make(chan struct{})}
}

// Name returns the event's name, such as "shutdown-initiated".
func (e *Event) Name() string { return e.name }

// Done returns a channel that is closed when the event fires.
func (e *Event) Done() <-chan struct{} { return e.ch }

// Fired reports whether the event has fired: its channel is closed.
func (e *Event) Fired() bool {
	select {
	case <-e.ch:
		return true
	default:
		return false
	}
}

// At returns when the event fired, read from the Lifecycle's clock, and
// false if it has not happened yet. The time is known from the instant the
// event happens, before it is announced (logged, reported to
// Config.OnTransition, Done closed): a caller told that the event has
// already happened — BeginShutdown returning false, say — reads its time
// at once, even while the goroutine that made it happen is still writing
// its log line.
func (e *Event) At() (time.Time, bool) {
	if t := e.at.Load(); t != nil {
		return *t, true
	}
	return time.Time{}, false
}

// stamp records the clock's time now as the event's time, unless a time is
// recorded already: the event has happened, and fire announces it next.
func (e *Event) stamp() {
	if e.at.Load() == nil {
		at := e.clock.Now()
		e.at.CompareAndSwap(nil, &at)
	}
}

// fire records the clock's time now (unless stamp did first; the stamped
// time is kept), reports the event (Config.OnTransition) and then closes
// the channel; it reports whether this call was the one that fired it. It
// takes no time: the event reads its own clock when it fires, so
// `defer ev.fire()` records the moment the deferred call runs. The report
// comes before the close, so a goroutine that waits on Done and fires the
// next event cannot report it first: OnTransition hears the events in order
// even when they fire on different goroutines.
func (e *Event) fire() bool {
	fired := false
	e.once.Do(func() {
		e.stamp()
		at := *e.at.Load()
		if e.on != nil {
			e.on(e, at)
		}
		close(e.ch)
		fired = true
	})
	return fired
}

// Events are the one-shot events of one Lifecycle, listed in the order they
// fire, but for HooksDone and HTTPDrained: the teardown hooks and the HTTP
// drain run side by side from WindowEnded, so those two fire in either
// order, both after WindowEnded and before Joined.
// This comment defines the shutdown sequence's timeline; the operations
// guide (docs/probes-and-shutdown.md), the package overview and every other
// doc comment link here rather than repeat it. An event fires once, when
// the step it ends is over, and its time (Event.At) is read from the
// Lifecycle's clock at that instant, so the time between two events is the
// step between them (contrib/prometheus reports them so). Kubernetes' side
// of the sequence, which runs in parallel and unsynchronised with it, is at
// https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination.
//
//	Run ── bind every server (a bind failure returns at once), serve; the probes
//	 │     answer; startup tasks run: /startupz and /readyz 503 starting
//	 ▼
//	StartupDone ── phase serving: /startupz 200, /readyz follows its checks
//	 │
//	 ▼
//	ShutdownInitiated ── t = 0: SIGTERM or SIGINT, GET /prestop, BeginShutdown,
//	 │     Run's ctx cancelled, a server failing, a startup task failing.
//	 │     Phase draining: /readyz 503 draining (checks no longer run; 200 draining
//	 │     until WindowEnded under NotReadyAt "teardown"), /healthz 200;
//	 │     responses from now on carry Connection: close (HTTP/2: GOAWAY); new
//	 │     WebSocket upgrades get 503 Retry-After: 1; the contexts of GoLoop and
//	 │     startup tasks are cancelled, a new GoLoop returns ErrShuttingDown.
//	 │  the lame-duck window W: the service serves as usual (new GoWrite accepted)
//	 │     delay mode: W = ShutdownDelay
//	 │     idle mode:  until no traffic for IdleWindow, in [ShutdownDelay, DrainTimeout]
//	 │     never ready (phase starting at t = 0): W = 0
//	 ▼
//	WindowEnded ── t = W: its Done channel closes (WebSockets
//	 │     send close 1001, streams end); GET /prestop answers 200; phase
//	 │     stopping; the teardown budget T (ShutdownTeardown) starts
//	 ├──────────────────────────────────────────┐ side by side
//	 │  the HTTP drain, until T − tail:         │  the teardown hooks, in order, for
//	 │   [SendRetryAfter: 503 Retry-After       │  at most HookShare × T, never past
//	 │    until nothing is in flight]           │  the HTTP drain's end
//	 │   listeners close; a connection          ▼
//	 │    accepted just before has ≤250ms    HooksDone
//	 │    to send its request
//	 │   Shutdown (http.Server's, ServerFuncs'); wait for every tracked handler,
//	 │    WebSockets included; at T − tail what is left is closed and named
//	 │   then the probe listener
//	 ▼
//	HTTPDrained
//	 │  (after HooksDone too) the background join: GoWrite and GoLoop tasks, for
//	 │   what T has left less the closers' tail, at most JoinBudget when set
//	 ▼
//	Joined ── from now on GoWrite, like GoLoop, returns ErrShuttingDown
//	 │  the closers, in reverse order of registration, each an equal share of
//	 │   what is left of T
//	 ▼
//	Stopped ── phase stopped; Run returns nil, or an error wrapping
//	           context.DeadlineExceeded when requests were cut, a hook overran
//	           or background work was abandoned
//
// From ShutdownInitiated to Stopped takes at most the window's bound
// (ShutdownDelay; DrainTimeout in idle mode) plus
// ShutdownTeardown. The tail is kept for the join and the closers only
// when they are used (docs/probes-and-shutdown.md, "Teardown: hooks, HTTP
// drain, background join, closers", gives its arithmetic).
//
// A field is never nil. Events that a run skips (StartupDone when a startup
// task fails, WindowEnded when the signal never comes before a fatal error)
// may stay unfired until Stopped.
type Events struct {
	// StartupDone fires when every startup task has returned nil and the
	// phase becomes serving.
	StartupDone *Event
	// ShutdownInitiated fires when the sequence starts: the first SIGTERM or
	// SIGINT, a GET /prestop, a call to Lifecycle.BeginShutdown, the cancellation
	// of Run's context, or a fatal error. /readyz answers 503 draining from
	// this instant (from WindowEnded under Config.NotReadyAt "teardown").
	ShutdownInitiated *Event
	// WindowEnded fires when the lame-duck window has passed and teardown
	// begins. GET /prestop answers at this instant. Long-lived handlers
	// select on its Done channel to finish cleanly: a WebSocket sends a
	// close frame with status 1001 (going away), a server-sent-event stream
	// writes a final event and returns; a handler that ignores it is cut at
	// the teardown budget and named in the log.
	WindowEnded *Event
	// HooksDone fires when the teardown hooks have returned or overrun
	// their share of the teardown budget (at once when there are none).
	HooksDone *Event
	// HTTPDrained fires when every registered server has shut down, cleanly
	// or by force at the teardown budget.
	HTTPDrained *Event
	// Joined fires when the background join is over: every GoWrite and
	// GoLoop task has returned, or the join's bound (what the teardown
	// left, or Config.JoinBudget) is reached. From then on
	// new background work is refused.
	Joined *Event
	// Stopped fires when the sequence has finished, just before Run returns.
	Stopped *Event
}

// newEvents makes the events of one Lifecycle, timed by clock; on, when
// not nil, hears every firing, before the event's channel is closed.
func newEvents(clock Clock, on func(*Event, time.Time)) *Events {
	es := &Events{
		StartupDone:       newEvent("startup-done", clock),
		ShutdownInitiated: newEvent("shutdown-initiated", clock),
		WindowEnded:       newEvent("window-ended", clock),
		HooksDone:         newEvent("hooks-done", clock),
		HTTPDrained:       newEvent("http-drained", clock),
		Joined:            newEvent("joined", clock),
		Stopped:           newEvent("stopped", clock),
	}
	if on != nil {
		for _, e := range []*Event{es.StartupDone, es.ShutdownInitiated, es.WindowEnded, es.HooksDone,
			es.HTTPDrained, es.Joined, es.Stopped} {
			e.on = on
		}
	}
	return es
}
