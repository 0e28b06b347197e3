// Package ldprometheus exports a Lifecycle's phase, readiness checks, probe
// answers, in-flight requests and shutdown steps as Prometheus metrics,
// through client_golang (github.com/prometheus/client_golang).
//
// Import it as
//
//	import ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
//
// It is a module of its own: the core never imports client_golang. It
// builds on lameduck.Config.OnTransition. One call attaches it to the
// Config the Lifecycle is then built from, as ldotel.Instrument does for
// OpenTelemetry:
//
//	var cfg lameduck.Config
//	if err := ldprometheus.Instrument(&cfg, prometheus.DefaultRegisterer); err != nil { ... }
//	lc, err := lameduck.New(cfg)
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
//	lameduck_requests_in_flight                           application requests in flight (from the first transition)
//	lameduck_check_status{check,critical,outcome}         1 for each check's last outcome, 0 for the others
//	lameduck_check_results_total{check,outcome}           verdicts, by outcome
//	lameduck_check_duration_seconds{check}                histogram of ping durations (stalled excluded), buckets 1ms … 5s
//	lameduck_probe_answers_total{path,code}               probe answers; path /healthz, /readyz, /readyz/*, /startupz, /prestop or other
//	lameduck_shutdown_step_duration_seconds{step}         window, hooks, http_drain, join, closers, total; set as each ends
//	lameduck_requests_cut_total                           requests closed by force at the teardown budget
//	lameduck_join_overruns_total                          background joins that ran out of budget
//	lameduck_background_tasks_abandoned_total             tasks still running when a join ran out
//	lameduck_maintenance                                  1 while the maintenance switch is on (from the first transition)
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

// Instrument attaches lameduck's series to cfg, for the Lifecycle that
// lameduck.New (or worker.New, given the runner's Config.Lifecycle) then
// builds from it: it registers a collector of every series with reg and
// chains the collector's hook after cfg.OnTransition, which still hears
// every transition, first. Serve reg's series with promhttp
// (prometheus.DefaultRegisterer's through promhttp.Handler(), a registry of
// your own through promhttp.HandlerFor).
//
// Set your own OnTransition before calling Instrument: one set after it
// replaces the collector's hook. Build one Lifecycle from cfg: the series
// count the transitions of every Lifecycle built from it, and read the
// phase, the requests in flight and the maintenance switch of the first
// one to report a transition (Transition.Lifecycle). Until that first
// transition (an event, a check's verdict, a probe's answer),
// lameduck_requests_in_flight and lameduck_maintenance are not exported
// and the phase is starting.
//
// It returns an error when cfg or reg is nil, or reg's Register error,
// wrapped (a prometheus.AlreadyRegisteredError when reg already holds
// lameduck's series: one instrumented Config per registry); cfg is left
// as it was then. The series stay registered when lameduck.New later
// refuses cfg.
func Instrument(cfg *lameduck.Config, reg prometheus.Registerer) error {
	if cfg == nil {
		return errors.New("lameduck: ldprometheus.Instrument: the Config is nil; pass the address of the Config you give lameduck.New")
	}
	if reg == nil {
		return errors.New("lameduck: ldprometheus.Instrument: the Registerer is nil; pass prometheus.DefaultRegisterer or a registry of your own")
	}
	col := newCollector()
	if err := reg.Register(col); err != nil {
		return fmt.Errorf("lameduck: ldprometheus.Instrument: registering lameduck's series: %w", err)
	}
	col.tr.Attach(cfg)
	return nil
}

// collector is the prometheus.Collector of one instrumented Config. All
// methods are safe for concurrent use.
type collector struct {
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

// newCollector returns a collector with no observation yet: phase
// starting, no checks, every counter at zero. Its series are the list every
// lameduck metrics integration shares, under Prometheus' names (see the
// package doc).
func newCollector() *collector {
	c := &collector{
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

// sink records the Tracker's counts in the collector's series.
type sink struct{ c *collector }

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
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.phaseDesc
	ch <- c.inFlight
	ch <- c.maintD
	ch <- c.statusD
	for _, m := range c.metrics() {
		m.Describe(ch)
	}
}

// metrics are the series client_golang keeps for the collector.
func (c *collector) metrics() []prometheus.Collector {
	return []prometheus.Collector{c.results, c.durations, c.probes, c.steps, c.cut, c.overruns, c.abandoned}
}

// Collect sends the current value of every series, for
// prometheus.Gatherer.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
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
