package lameduck

import (
	"net/http"
	"time"

	"github.com/lameduck/lameduck/health"
)

// TransitionKind says what a [Transition] reports; its value is the kind's
// name, ready for a metric's label or a log line.
type TransitionKind string

const (
	// TransitionEvent: one of the Lifecycle's one-shot [Events] fired
	// (Transition.Event); Phase is the phase it leads to. The time between
	// two events is the duration of a shutdown step: WindowEnded −
	// ShutdownInitiated is the window, HTTPDrained − WindowEnded the HTTP
	// drain, Joined − HTTPDrained the background join, Stopped − Joined the
	// closers.
	TransitionEvent TransitionKind = "event"
	// TransitionCheck: a readiness check has a verdict (Transition.Check):
	// once per ping when its outcome is decided, and once per probe that
	// finds the check "stalled" (see health.CheckerOptions.OnResult).
	TransitionCheck TransitionKind = "check"
	// TransitionProbe: a probe was answered: Path (the request's path, such
	// as "/readyz" or "/readyz/db"; any path the probe handler answered,
	// 404s included) and Code.
	TransitionProbe TransitionKind = "probe"
	// TransitionCut: the teardown's budget ran out and Count in-flight
	// requests were closed by force (the log names them).
	TransitionCut TransitionKind = "cut"
	// TransitionAbandoned: the background join's budget ran out with Count
	// tasks still running, abandoned at exit (the log names them).
	TransitionAbandoned TransitionKind = "abandoned"
)

// Transition is one thing that happened to a Lifecycle, handed to
// Config.OnTransition: the raw material of metrics (the
// contrib/prometheus module turns it into Prometheus series). Kind, At,
// Phase and Lifecycle are always set; of the others, only the fields of
// its Kind.
type Transition struct {
	Kind TransitionKind
	// At is when it happened, on the Lifecycle's clock (for
	// TransitionCheck, the result's own Time).
	At time.Time
	// Phase is the phase at that moment; for TransitionEvent, the phase the
	// event leads to.
	Phase Phase
	// Event is the event that fired (TransitionEvent).
	Event *Event
	// Check is the check's result (TransitionCheck): name, outcome,
	// criticality and the ping's duration.
	Check health.Result
	// Path and Code are the probe's request path and response status
	// (TransitionProbe).
	Path string
	Code int
	// Count is how many requests were cut (TransitionCut) or tasks
	// abandoned (TransitionAbandoned).
	Count int
	// Lifecycle is the Lifecycle it happened to: a hook attached to a
	// Config before New (contrib/prometheus's, contrib/otel's) learns
	// there which Lifecycle to read (its Phase, InFlight, Maintenance)
	// between transitions. The hook must not start or end it from the
	// call (no Run, no BeginShutdown; see Config.OnTransition).
	Lifecycle *Lifecycle
}

// transition hands t to Config.OnTransition, if set.
func (l *Lifecycle) transition(t Transition) {
	if h := l.cfg.OnTransition; h != nil {
		if t.Phase == 0 && t.Kind != TransitionEvent {
			t.Phase = l.Phase()
		}
		t.Lifecycle = l
		h(t)
	}
}

// eventFired reports an event's firing; wired into Events by New.
func (l *Lifecycle) eventFired(e *Event, at time.Time) {
	var p Phase
	switch e {
	case l.events.StartupDone:
		p = PhaseServing
	case l.events.ShutdownInitiated:
		p = PhaseDraining
	case l.events.Stopped:
		p = PhaseStopped
	default:
		p = PhaseStopping
	}
	// Phases only move forward: StartupDone may fire just after the
	// sequence started on another goroutine (the boot ended as the signal
	// came); its report then carries the later phase, so a phase gauge fed
	// by the reports never goes backwards.
	l.transition(Transition{Kind: TransitionEvent, At: at, Phase: max(p, l.Phase()), Event: e})
}

// countProbes wraps the probe handler so that every answer is reported as
// a TransitionProbe; only when Config.OnTransition is set.
func (l *Lifecycle) countProbes(h http.Handler) http.Handler {
	if l.cfg.OnTransition == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &codeWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		code := cw.code
		if code == 0 {
			code = http.StatusOK
		}
		l.transition(Transition{Kind: TransitionProbe, At: l.clock.Now(), Path: r.URL.Path, Code: code})
	})
}

// codeWriter remembers the status code written through it.
type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *codeWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (GET /prestop flushes and waits on it).
func (w *codeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
