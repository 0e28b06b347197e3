// Package ldprometheus exports a Lifecycle's phase, readiness checks, probe
// answers, in-flight requests and shutdown steps as Prometheus metrics,
// through client_golang (github.com/prometheus/client_golang).
//
// Import it as
//
//	import ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
//
// It is a module of its own: the core never imports client_golang. It
// builds on lameduck.Config.OnTransition. One call wires it, as
// ldotel.New does for OpenTelemetry:
//
//	lc, err := ldprometheus.New(lameduck.Config{}, prometheus.DefaultRegisterer)
//
// contrib/otel exports the same metrics, from the same list and the same
// bookkeeping, through OpenTelemetry. The operator's page, with every
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
//	lameduck_check_duration_seconds{check}                histogram of ping durations (stalled excluded), buckets 1ms … 5s
//	lameduck_probe_answers_total{path,code}               probe answers; path /healthz, /readyz, /readyz/*, /startupz, /prestop or other
//	lameduck_shutdown_step_duration_seconds{step}         window, hooks, http_drain, join, closers, total; set as each ends
//	lameduck_requests_cut_total                           requests closed by force at the teardown budget
//	lameduck_join_overruns_total                          background joins that ran out of budget
//	lameduck_background_tasks_abandoned_total             tasks still running when a join ran out
//	lameduck_maintenance                                  1 while the maintenance switch is on (after Watch)
package ldprometheus

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/measure"
	"github.com/prometheus/client_golang/prometheus"
)

// New returns a Lifecycle configured by cfg (see lameduck.New) whose
// metrics are registered with reg, wired in one call: it creates a
// [Collector] ([NewCollector]), chains [Collector.Observe] after
// cfg.OnTransition (which still hears every transition, first), registers
// the Collector with reg, creates the Lifecycle and calls [Collector.Watch]
// with it. Serve reg's series with promhttp (prometheus.DefaultRegisterer's
// through promhttp.Handler(), a registry of your own through
// promhttp.HandlerFor).
//
// It returns an error when reg is nil; reg's Register error, wrapped (a
// prometheus.AlreadyRegisteredError when reg already holds lameduck's
// series: one Lifecycle per registry); or lameduck.New's (an invalid
// setting, lameduck.ErrInvalidConfig). Nothing stays registered then.
func New(cfg lameduck.Config, reg prometheus.Registerer) (*lameduck.Lifecycle, error) {
	if reg == nil {
		return nil, errors.New("lameduck: ldprometheus.New: the Registerer is nil; pass prometheus.DefaultRegisterer or a registry of your own")
	}
	col := NewCollector()
	if err := reg.Register(col); err != nil {
		return nil, fmt.Errorf("lameduck: ldprometheus.New: registering lameduck's series: %w", err)
	}
	if prev := cfg.OnTransition; prev != nil {
		cfg.OnTransition = func(t lameduck.Transition) { prev(t); col.Observe(t) }
	} else {
		cfg.OnTransition = col.Observe
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		reg.Unregister(col)
		return nil, err
	}
	col.Watch(lc)
	return lc, nil
}

// Collector is a prometheus.Collector for one Lifecycle. Use [New] to wire
// it in one call, or, to compose it with another OnTransition hook
// (contrib/otel's Metrics, say), create it with [NewCollector], pass its
// Observe method as Config.OnTransition, call Watch with the Lifecycle,
// and register it:
//
//	col := ldprometheus.NewCollector()
//	lc, err := lameduck.New(lameduck.Config{OnTransition: col.Observe})
//	...
//	col.Watch(lc)
//	reg.MustRegister(col)
//
// The zero value is not usable. All methods are safe for concurrent use.
type Collector struct {
	tr *measure.Tracker

	phaseDesc *prometheus.Desc
	inFlight  *prometheus.Desc
	maintD    *prometheus.Desc
	statusD   *prometheus.Desc

	results   *prometheus.CounterVec
	durations *prometheus.HistogramVec
	probes    *prometheus.CounterVec
	steps     *prometheus.GaugeVec
	cut       prometheus.Counter
	overruns  prometheus.Counter
	abandoned prometheus.Counter
}

// promLabels are m's Prometheus label names.
func promLabels(m measure.Metric) []string {
	var names []string
	for _, l := range m.Labels {
		names = append(names, l.Prom)
	}
	return names
}

func desc(m measure.Metric) *prometheus.Desc {
	return prometheus.NewDesc(m.Prom, m.Help, promLabels(m), nil)
}

func counterVec(m measure.Metric) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Prom, Help: m.Help}, promLabels(m))
}

func counter(m measure.Metric) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: m.Prom, Help: m.Help})
}

// NewCollector returns a Collector with no observation yet: phase
// starting, no checks, every counter at zero. Its series are the list every lameduck
// metrics integration shares, under Prometheus' names (see the package
// doc).
func NewCollector() *Collector {
	c := &Collector{
		phaseDesc: desc(measure.Phase),
		inFlight:  desc(measure.InFlight),
		maintD:    desc(measure.Maintenance),
		statusD:   desc(measure.CheckStatus),
		results:   counterVec(measure.CheckResults),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: measure.CheckDuration.Prom,
			Help: measure.CheckDuration.Help, Buckets: measure.Buckets}, promLabels(measure.CheckDuration)),
		probes: counterVec(measure.ProbeAnswers),
		steps: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: measure.StepDuration.Prom, Help: measure.StepDuration.Help},
			promLabels(measure.StepDuration)),
		cut:       counter(measure.RequestsCut),
		overruns:  counter(measure.JoinOverruns),
		abandoned: counter(measure.TasksAbandoned),
	}
	c.tr = measure.NewTracker(sink{c})
	return c
}

// Watch makes the Collector read lc's phase and in-flight requests at each
// scrape. Without it, lameduck_phase follows the events Observe hears and
// lameduck_requests_in_flight is not exported.
func (c *Collector) Watch(lc *lameduck.Lifecycle) { c.tr.Watch(lc) }

// Observe records t. Pass it as lameduck.Config.OnTransition. It does not
// block beyond the metrics' own locks and allocates only for a check or
// path it has not seen before.
func (c *Collector) Observe(t lameduck.Transition) { c.tr.Observe(t) }

// sink records the Tracker's counts in the Collector's series.
type sink struct{ c *Collector }

func (s sink) CheckResult(check string, o health.Outcome) {
	s.c.results.WithLabelValues(check, string(o)).Inc()
}

func (s sink) CheckDuration(check string, d time.Duration) {
	s.c.durations.WithLabelValues(check).Observe(d.Seconds())
}

func (s sink) ProbeAnswer(path string, code int) {
	s.c.probes.WithLabelValues(path, strconv.Itoa(code)).Inc()
}

func (s sink) StepEnded(step string, d time.Duration) {
	s.c.steps.WithLabelValues(step).Set(d.Seconds())
}
func (s sink) Cut(n int)       { s.c.cut.Add(float64(n)) }
func (s sink) Abandoned(n int) { s.c.overruns.Inc(); s.c.abandoned.Add(float64(n)) }

// Describe sends the descriptors of every series, for
// prometheus.Registerer.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.phaseDesc
	ch <- c.inFlight
	ch <- c.maintD
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
	if n, ok := c.tr.InFlight(); ok {
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(n))
	}
	if v, ok := c.tr.Maintenance(); ok {
		ch <- prometheus.MustNewConstMetric(c.maintD, prometheus.GaugeValue, float64(v))
	}
	cur := c.tr.Phase()
	for _, p := range measure.Phases {
		v := 0.0
		if p == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.phaseDesc, prometheus.GaugeValue, v, p.String())
	}
	for name, st := range c.tr.Checks() { // a copy: no lock held while the registry reads ch
		for _, o := range measure.Outcomes {
			v := 0.0
			if o == st.Outcome {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.statusD, prometheus.GaugeValue, v, name, strconv.FormatBool(st.Critical), string(o))
		}
	}
	for _, m := range c.metrics() {
		m.Collect(ch)
	}
}
