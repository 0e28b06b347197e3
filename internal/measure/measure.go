// Package measure is the one list of what lameduck's metrics integrations
// measure, and the bookkeeping they share: contrib/prometheus (ldprometheus) and
// contrib/otel (ldotel) both export exactly the metrics of [All], under the
// names, units and label keys given here, fed by one [Tracker]. It imports
// only the standard library and the core, so the core never depends on a
// metrics library and neither integration keeps a copy of the other's list.
//
// It is internal: users read the list in docs/prometheus.md and
// docs/otel.md, which name every metric of both integrations.
package measure

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// Kind is how a metric is recorded.
type Kind int

const (
	// Gauge is a value read at each collection (a state set of 0 and 1, or
	// a duration set once).
	Gauge Kind = iota
	// UpDownCounter is a count that rises and falls, read at each
	// collection (an OpenTelemetry observable up-down counter, a Prometheus
	// gauge).
	UpDownCounter
	// Counter only rises (a Prometheus counter with _total, an
	// OpenTelemetry counter).
	Counter
	// Histogram is a distribution of observed values, in Buckets.
	Histogram
)

// Label is one label (Prometheus) or attribute (OpenTelemetry) of a
// metric, under the key each uses.
type Label struct {
	Prom, OTel string
}

// The labels, by what they hold.
var (
	LabelPhase    = Label{"phase", "lameduck.phase"}
	LabelCheck    = Label{"check", "lameduck.check.name"}
	LabelCritical = Label{"critical", "lameduck.check.critical"}
	LabelOutcome  = Label{"outcome", "lameduck.check.outcome"}
	// LabelPath is the probe path, bounded (see ProbePath): a route in
	// OpenTelemetry's semantic conventions.
	LabelPath = Label{"path", "http.route"}
	// LabelCode is the response's HTTP status code.
	LabelCode = Label{"code", "http.response.status_code"}
	LabelStep = Label{"step", "lameduck.shutdown.step"}
)

// Metric is one thing lameduck measures.
type Metric struct {
	// Prom is its Prometheus name (base units, _total for counters).
	Prom string
	// OTel is its OpenTelemetry instrument name (dotted, no unit in the
	// name, no _total), following the semantic conventions' naming rules.
	OTel string
	// Unit is its UCUM unit, as OpenTelemetry records it ("s", "1",
	// "{request}"); the Prometheus name carries the base unit instead.
	Unit string
	Kind Kind
	// Help is its description, for both.
	Help   string
	Labels []Label
}

// The metrics, in the order of [All].
var (
	Phase = Metric{"lameduck_phase", "lameduck.phase", "1", Gauge,
		"The Lifecycle's phase: 1 for the current one (starting, serving, draining, stopping, stopped), 0 for the others.",
		[]Label{LabelPhase}}
	InFlight = Metric{"lameduck_requests_in_flight", "lameduck.server.active_requests", "{request}", UpDownCounter,
		"Application requests in flight on the Lifecycle's servers (probes excluded), WebSockets included.", nil}
	CheckStatus = Metric{"lameduck_check_status", "lameduck.check.status", "1", Gauge,
		"Each readiness check's last outcome: 1 for it (ok, error, timeout, stalled, panic), 0 for the others.",
		[]Label{LabelCheck, LabelCritical, LabelOutcome}}
	CheckResults = Metric{"lameduck_check_results_total", "lameduck.check.results", "{result}", Counter,
		"Readiness check verdicts, by check and outcome: one per ping, and one per probe that found the check stalled.",
		[]Label{LabelCheck, LabelOutcome}}
	CheckDuration = Metric{"lameduck_check_duration_seconds", "lameduck.check.duration", "s", Histogram,
		"How long each readiness check's ping took, in seconds, up to its deadline for a timeout; stalled probes are not observed.",
		[]Label{LabelCheck}}
	ProbeAnswers = Metric{"lameduck_probe_answers_total", "lameduck.probe.answers", "{answer}", Counter,
		"Probe answers by path (/healthz, /readyz, /readyz/*, /startupz, /prestop, other) and HTTP status code.",
		[]Label{LabelPath, LabelCode}}
	StepDuration = Metric{"lameduck_shutdown_step_duration_seconds", "lameduck.shutdown.step.duration", "s", Gauge,
		"How long each step of the shutdown sequence took, in seconds (window, hooks, http_drain, join, closers, total), set as each ends.",
		[]Label{LabelStep}}
	RequestsCut = Metric{"lameduck_requests_cut_total", "lameduck.server.requests.cut", "{request}", Counter,
		"In-flight requests closed by force when the teardown budget ran out.", nil}
	JoinOverruns = Metric{"lameduck_join_overruns_total", "lameduck.join.overruns", "{join}", Counter,
		"Background joins that ran out of budget with tasks still running.", nil}
	Maintenance = Metric{"lameduck_maintenance", "lameduck.maintenance", "1", Gauge,
		"1 while the maintenance switch holds the pod out of rotation (readiness 503 maintenance, nothing drained), 0 otherwise; reported once the Lifecycle is watched.", nil}
	TasksAbandoned = Metric{"lameduck_background_tasks_abandoned_total", "lameduck.background.tasks.abandoned", "{task}", Counter,
		"Background tasks still running when the join ran out of budget, abandoned at exit.", nil}
)

// All is every metric, each exported by both integrations.
var All = []Metric{Phase, InFlight, CheckStatus, CheckResults, CheckDuration, ProbeAnswers, StepDuration,
	RequestsCut, JoinOverruns, TasksAbandoned, Maintenance}

// Buckets are the bounds of CheckDuration, in seconds: a readiness check's
// deadline is 1s by default, so they are finest below it and end a little
// above the deadlines one sets.
var Buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// Phases are the values of LabelPhase, in order.
var Phases = [...]lameduck.Phase{lameduck.PhaseStarting, lameduck.PhaseServing, lameduck.PhaseDraining,
	lameduck.PhaseStopping, lameduck.PhaseStopped}

// Outcomes are the values of LabelOutcome in CheckStatus.
var Outcomes = [...]health.Outcome{health.OutcomeOK, health.OutcomeError, health.OutcomeTimeout,
	health.OutcomeStalled, health.OutcomePanic}

// ProbePath bounds LabelPath: the probe paths of cfg, a resolved Config
// (the liveness paths, the readiness, startup and preStop paths) are
// themselves, per-check readiness paths are one value (the readiness path
// + "/*"), and anything else the probe handler answered (a 404) is
// "other".
func ProbePath(cfg *lameduck.Config, p string) string {
	if p == cfg.ReadinessPath || p == cfg.StartupPath || p == cfg.PreStopPath || slices.Contains(cfg.LivenessPaths, p) {
		return p
	}
	if strings.HasPrefix(p, cfg.ReadinessPath+"/") {
		return cfg.ReadinessPath + "/*"
	}
	return "other"
}

// Sink records what a [Tracker] hears, in an integration's own
// instruments. Its methods must be safe for concurrent use and return at
// once; the Tracker holds no lock while it calls them.
type Sink interface {
	// CheckResult is one verdict of check, for CheckResults.
	CheckResult(check string, outcome health.Outcome)
	// CheckDuration is one ping's duration, for CheckDuration (a stalled
	// verdict has none).
	CheckDuration(check string, d time.Duration)
	// ProbeAnswer is one probe answer: path is bounded by ProbePath.
	ProbeAnswer(path string, code int)
	// StepEnded sets StepDuration of step to d.
	StepEnded(step string, d time.Duration)
	// Cut adds n to RequestsCut.
	Cut(n int)
	// Abandoned is one join overrun (JoinOverruns) that abandoned n tasks
	// (TasksAbandoned).
	Abandoned(n int)
}

// CheckState is a check's last verdict, for CheckStatus.
type CheckState struct {
	Outcome  health.Outcome
	Critical bool
}

// Tracker is the bookkeeping both integrations share: it hears the
// Lifecycle's transitions (Observe), hands the counts to a Sink, and keeps
// what the gauges read at each collection (the phase, each check's last
// verdict, the shutdown steps' ends). It reads the Lifecycle's own state
// (its phase, requests in flight, maintenance switch) from the Lifecycle
// the first Transition it hears names (Transition.Lifecycle): the
// integrations attach it to a Config, before the Lifecycle exists. The
// zero value is not usable; use [NewTracker]. Safe for concurrent use.
type Tracker struct {
	sink  Sink
	lc    atomic.Pointer[lameduck.Lifecycle] // the first Transition's Lifecycle
	phase atomic.Int32                       // a lameduck.Phase, from the events; used until lc is known

	mu     sync.Mutex
	last   map[string]CheckState // guarded by mu: check name → last verdict
	events map[string]time.Time  // guarded by mu: event name → when it fired
}

// NewTracker returns a Tracker that records into sink.
func NewTracker(sink Sink) *Tracker {
	return &Tracker{sink: sink, last: map[string]CheckState{}, events: map[string]time.Time{}}
}

// Phase returns the current phase: the later of the Lifecycle's (once
// known) and the one the last event led to. Phases only move forward, and the Lifecycle
// reports an event (window-ended, say) a moment before its own phase
// follows: the later of the two never shows a step's end with the phase
// before it.
func (t *Tracker) Phase() lameduck.Phase {
	p := lameduck.Phase(t.phase.Load())
	if lc := t.lc.Load(); lc != nil {
		p = max(p, lc.Phase())
	}
	return p
}

// InFlight returns the application requests in flight, and false until
// the Lifecycle is known (the metric is not exported then).
func (t *Tracker) InFlight() (int, bool) {
	if lc := t.lc.Load(); lc != nil {
		return len(lc.InFlight()), true
	}
	return 0, false
}

// Maintenance returns 1 while the Lifecycle's maintenance switch is on, 0
// while it is off, and false until the Lifecycle is known.
func (t *Tracker) Maintenance() (int, bool) {
	if lc := t.lc.Load(); lc != nil {
		if on, _ := lc.Maintenance(); on {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// Checks returns a copy of each check's last verdict.
func (t *Tracker) Checks() map[string]CheckState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.last)
}

// Attach chains Observe after cfg.OnTransition (the hook already set still
// hears every transition, first), or sets it when cfg has none: the one
// way an integration's Instrument hooks a Tracker to a Config.
func (t *Tracker) Attach(cfg *lameduck.Config) {
	if prev := cfg.OnTransition; prev != nil {
		cfg.OnTransition = func(tr lameduck.Transition) { prev(tr); t.Observe(tr) }
		return
	}
	cfg.OnTransition = t.Observe
}

// Observe records tr: pass it as lameduck.Config.OnTransition (through an
// integration's own hook). The first Transition naming a Lifecycle makes
// it the one the Tracker reads; a later one naming another (a second
// Lifecycle made from the same Config) is counted but not read. It does
// not block beyond its own lock and the Sink's.
func (t *Tracker) Observe(tr lameduck.Transition) {
	if tr.Lifecycle != nil && t.lc.Load() == nil {
		t.lc.CompareAndSwap(nil, tr.Lifecycle)
	}
	switch tr.Kind {
	case lameduck.TransitionEvent:
		t.phase.Store(int32(tr.Phase))
		t.eventFired(tr.Event.Name(), tr.At)
	case lameduck.TransitionCheck:
		r := tr.Check
		t.sink.CheckResult(r.Name, r.Outcome)
		if r.Outcome != health.OutcomeStalled {
			t.sink.CheckDuration(r.Name, r.Duration)
		}
		t.mu.Lock()
		t.last[r.Name] = CheckState{Outcome: r.Outcome, Critical: r.Critical}
		t.mu.Unlock()
	case lameduck.TransitionProbe:
		path := "other"
		if tr.Lifecycle != nil {
			cfg := tr.Lifecycle.Config()
			path = ProbePath(&cfg, tr.Path)
		}
		t.sink.ProbeAnswer(path, tr.Code)
	case lameduck.TransitionCut:
		t.sink.Cut(tr.Count)
	case lameduck.TransitionAbandoned:
		t.sink.Abandoned(tr.Count)
	}
}

// stepEnds are the steps of the shutdown sequence: the event that ends
// each, and the events it is measured from (the later of them).
var stepEnds = []struct {
	step, end string
	from      []string
}{
	{"window", "window-ended", []string{"shutdown-initiated"}},
	{"hooks", "hooks-done", []string{"window-ended"}},
	{"http_drain", "http-drained", []string{"window-ended"}},
	{"join", "joined", []string{"hooks-done", "http-drained"}},
	{"closers", "stopped", []string{"joined"}},
	{"total", "stopped", []string{"shutdown-initiated"}},
}

func (t *Tracker) eventFired(name string, at time.Time) {
	type ended struct {
		step string
		d    time.Duration
	}
	var done []ended
	t.mu.Lock()
	t.events[name] = at
	for _, s := range stepEnds {
		if s.end != name {
			continue
		}
		var from time.Time
		ok := true
		for _, f := range s.from {
			ft, fired := t.events[f]
			ok = ok && fired
			if ft.After(from) {
				from = ft
			}
		}
		if ok {
			done = append(done, ended{s.step, at.Sub(from)})
		}
	}
	t.mu.Unlock()
	for _, d := range done {
		t.sink.StepEnded(d.step, d.d)
	}
}
