// Package ldprom exports a Lifecycle's phase, readiness checks, probe
// answers, in-flight requests and shutdown steps as Prometheus metrics,
// through client_golang (github.com/prometheus/client_golang).
//
// Import it as
//
//	import ldprom "github.com/lameduck/lameduck/contrib/prometheus"
//
// It is a module of its own: the core never imports client_golang. It
// builds on lameduck.Config.OnTransition. The operator's page, with every
// series and example queries, is docs/prometheus.md in the lameduck
// repository.
//
// The series, named by Prometheus' conventions (a lameduck_ prefix, base
// units, _total for counters; https://prometheus.io/docs/practices/naming/):
//
//	lameduck_phase{phase}                                 1 for the current phase, 0 for the others
//	lameduck_requests_in_flight                           application requests in flight (after Watch)
//	lameduck_check_status{check,critical,outcome}         1 for each check's last outcome, 0 for the others
//	lameduck_check_results_total{check,outcome}           verdicts, by outcome
//	lameduck_check_duration_seconds{check}                histogram of ping durations (stalled excluded)
//	lameduck_probe_answers_total{path,code}               probe answers; path /healthz, /readyz, /readyz/*, /startupz, /prestop or other
//	lameduck_shutdown_step_duration_seconds{step}         window, hooks, http_drain, join, closers, total; set as each ends
//	lameduck_requests_cut_total                           requests closed by force at the teardown budget
//	lameduck_join_overruns_total                          background joins that ran out of budget
//	lameduck_background_tasks_abandoned_total             tasks still running when a join ran out
package ldprom

import (
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/prometheus/client_golang/prometheus"
)

// phases are the values of lameduck_phase's label, in order.
var phases = [...]lameduck.Phase{lameduck.PhaseStarting, lameduck.PhaseServing, lameduck.PhaseDraining,
	lameduck.PhaseStopping, lameduck.PhaseStopped}

// outcomes are the values of lameduck_check_status's outcome label.
var outcomes = [...]health.Outcome{health.OutcomeOK, health.OutcomeError, health.OutcomeTimeout,
	health.OutcomeStalled, health.OutcomePanic}

// DurationBuckets are the buckets of lameduck_check_duration_seconds, in
// seconds: a readiness check's deadline is 1s by default, so they are
// finest below it and end a little above the deadlines one sets.
var DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// Collector is a prometheus.Collector for one Lifecycle. Create it with
// [New], pass its Observe method as Config.OnTransition, call Watch with
// the Lifecycle, and register it:
//
//	col := ldprom.New()
//	lc, err := lameduck.New(lameduck.Config{OnTransition: col.Observe})
//	...
//	col.Watch(lc)
//	reg.MustRegister(col)
//
// The zero value is not usable. All methods are safe for concurrent use.
type Collector struct {
	lc atomic.Pointer[lameduck.Lifecycle] // set by Watch

	phase     atomic.Int32 // a lameduck.Phase, from the events; used until Watch
	phaseDesc *prometheus.Desc
	inFlight  *prometheus.Desc
	statusD   *prometheus.Desc

	results   *prometheus.CounterVec
	durations *prometheus.HistogramVec
	probes    *prometheus.CounterVec
	steps     *prometheus.GaugeVec
	cut       prometheus.Counter
	overruns  prometheus.Counter
	abandoned prometheus.Counter

	mu     sync.Mutex
	last   map[string]checkState // guarded by mu: check name → last verdict
	events map[string]time.Time  // guarded by mu: event name → when it fired
}

type checkState struct {
	outcome  health.Outcome
	critical bool
}

// New returns a Collector with no observation yet: phase starting, no
// checks, every counter at zero.
func New() *Collector {
	return &Collector{
		phaseDesc: prometheus.NewDesc("lameduck_phase",
			"The Lifecycle's phase: 1 for the current one (starting, serving, draining, stopping, stopped), 0 for the others.",
			[]string{"phase"}, nil),
		inFlight: prometheus.NewDesc("lameduck_requests_in_flight",
			"Application requests in flight on the Lifecycle's servers (probes excluded), WebSockets included.", nil, nil),
		statusD: prometheus.NewDesc("lameduck_check_status",
			"Each readiness check's last outcome: 1 for it (ok, error, timeout, stalled, panic), 0 for the others.",
			[]string{"check", "critical", "outcome"}, nil),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lameduck_check_results_total",
			Help: "Readiness check verdicts, by check and outcome: one per ping, and one per probe that found the check stalled."},
			[]string{"check", "outcome"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lameduck_check_duration_seconds",
			Help:    "How long each readiness check's ping took, in seconds, up to its deadline for a timeout; stalled probes are not observed.",
			Buckets: DurationBuckets}, []string{"check"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lameduck_probe_answers_total",
			Help: "Probe answers by path (/healthz, /readyz, /readyz/*, /startupz, /prestop, other) and HTTP status code."},
			[]string{"path", "code"}),
		steps: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lameduck_shutdown_step_duration_seconds",
			Help: "How long each step of the shutdown sequence took, in seconds (window, hooks, http_drain, join, closers, total), set as each ends."},
			[]string{"step"}),
		cut: prometheus.NewCounter(prometheus.CounterOpts{Name: "lameduck_requests_cut_total",
			Help: "In-flight requests closed by force when the teardown budget ran out."}),
		overruns: prometheus.NewCounter(prometheus.CounterOpts{Name: "lameduck_join_overruns_total",
			Help: "Background joins that ran out of budget with tasks still running."}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "lameduck_background_tasks_abandoned_total",
			Help: "Background tasks still running when the join ran out of budget, abandoned at exit."}),
		last:   map[string]checkState{},
		events: map[string]time.Time{},
	}
}

// Watch makes the Collector read lc's phase and in-flight requests at each
// scrape. Without it, lameduck_phase follows the events Observe hears and
// lameduck_requests_in_flight is not exported.
func (c *Collector) Watch(lc *lameduck.Lifecycle) { c.lc.Store(lc) }

// Observe records t. Pass it as lameduck.Config.OnTransition. It does not
// block beyond the metrics' own locks and allocates only for a check or
// path it has not seen before.
func (c *Collector) Observe(t lameduck.Transition) {
	switch t.Kind {
	case lameduck.TransitionEvent:
		c.phase.Store(int32(t.Phase))
		c.eventFired(t.Event.Name(), t.At)
	case lameduck.TransitionCheck:
		r := t.Check
		c.results.WithLabelValues(r.Name, string(r.Outcome)).Inc()
		if r.Outcome != health.OutcomeStalled {
			c.durations.WithLabelValues(r.Name).Observe(r.Duration.Seconds())
		}
		c.mu.Lock()
		c.last[r.Name] = checkState{outcome: r.Outcome, critical: r.Critical}
		c.mu.Unlock()
	case lameduck.TransitionProbe:
		c.probes.WithLabelValues(probePath(t.Path), strconv.Itoa(t.Code)).Inc()
	case lameduck.TransitionCut:
		c.cut.Add(float64(t.Count))
	case lameduck.TransitionAbandoned:
		c.overruns.Inc()
		c.abandoned.Add(float64(t.Count))
	}
}

// probePath bounds the path label: per-check readiness paths are one
// value, and anything else the probe handler answered (a 404) is "other".
func probePath(p string) string {
	switch p {
	case lameduck.PathLiveness, lameduck.PathReadiness, lameduck.PathStartup, lameduck.PathPreStop:
		return p
	}
	if strings.HasPrefix(p, lameduck.PathReadiness+"/") {
		return lameduck.PathReadiness + "/*"
	}
	return "other"
}

// steps of the shutdown sequence: the event that ends each, and the event
// it is measured from (the later of two, for the join).
var stepEnds = []struct {
	step, end string
	from      []string
}{
	{"window", "window-ended", []string{"shutdown-initiated"}},
	{"hooks", "hooks-drained", []string{"window-ended"}},
	{"http_drain", "http-drained", []string{"window-ended"}},
	{"join", "joined", []string{"hooks-drained", "http-drained"}},
	{"closers", "stopped", []string{"joined"}},
	{"total", "stopped", []string{"shutdown-initiated"}},
}

func (c *Collector) eventFired(name string, at time.Time) {
	c.mu.Lock()
	c.events[name] = at
	type set struct {
		step string
		d    time.Duration
	}
	var done []set
	for _, s := range stepEnds {
		if s.end != name {
			continue
		}
		var from time.Time
		ok := true
		for _, f := range s.from {
			t, fired := c.events[f]
			ok = ok && fired
			if t.After(from) {
				from = t
			}
		}
		if ok {
			done = append(done, set{s.step, at.Sub(from)})
		}
	}
	c.mu.Unlock()
	for _, d := range done {
		c.steps.WithLabelValues(d.step).Set(d.d.Seconds())
	}
}

// Describe sends the descriptors of every series, for
// prometheus.Registerer.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.phaseDesc
	ch <- c.inFlight
	ch <- c.statusD
	for _, m := range c.metrics() {
		m.Describe(ch)
	}
}

// metrics are the series client_golang keeps for the Collector.
func (c *Collector) metrics() []prometheus.Collector {
	return []prometheus.Collector{c.results, c.durations, c.probes, c.steps, c.cut, c.overruns, c.abandoned}
}

// Collect sends the current value of every series, for
// prometheus.Gatherer.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	cur := lameduck.Phase(c.phase.Load())
	if lc := c.lc.Load(); lc != nil {
		cur = lc.Phase()
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(len(lc.InFlight())))
	}
	for _, p := range phases {
		v := 0.0
		if p == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.phaseDesc, prometheus.GaugeValue, v, p.String())
	}
	c.mu.Lock() // copied out: no lock held while the registry reads ch
	last := make(map[string]checkState, len(c.last))
	maps.Copy(last, c.last)
	c.mu.Unlock()
	for name, st := range last {
		for _, o := range outcomes {
			v := 0.0
			if o == st.outcome {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.statusD, prometheus.GaugeValue, v, name, strconv.FormatBool(st.critical), string(o))
		}
	}
	for _, m := range c.metrics() {
		m.Collect(ch)
	}
}
