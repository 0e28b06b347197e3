// Package ldotel exports a Lifecycle's phase, readiness checks, probe
// answers, in-flight requests and shutdown steps through the OpenTelemetry
// metric API (go.opentelemetry.io/otel/metric): the same metrics as
// contrib/prometheus, from the same list and the same bookkeeping, under
// OpenTelemetry's names.
//
// Import it as
//
//	import ldotel "github.com/lameduck/lameduck/contrib/otel"
//
// It is a module of its own: the core never imports OpenTelemetry, and
// this module pulls only its metric API (an SDK and an exporter are the
// application's choice). It builds on lameduck.Config.OnTransition. One
// call attaches it to the Config the Lifecycle is then built from, as
// ldprometheus.Instrument does for Prometheus:
//
//	var cfg lameduck.Config
//	if err := ldotel.Instrument(&cfg, otel.GetMeterProvider()); err != nil { ... }
//	lc, err := lameduck.New(cfg)
//
// The operator's page, with an OTLP exporter, every instrument and its
// Prometheus twin, is docs/otel.md in the lameduck repository.
//
// The instruments, named by OpenTelemetry's semantic-convention rules
// (https://opentelemetry.io/docs/specs/semconv/general/metrics/): a
// lameduck. namespace, UCUM units, no unit or _total in the name, and the
// conventions' own names where one exists (http.route and
// http.response.status_code; an active-requests up-down counter as
// http.server.active_requests is):
//
//	lameduck.phase{lameduck.phase}                                 gauge, 1: 1 for the current phase, 0 for the others
//	lameduck.server.active_requests                                up-down counter, {request}: application requests in flight (from the first transition)
//	lameduck.check.status{lameduck.check.name,lameduck.check.critical,lameduck.check.outcome}  gauge, 1: each check's last outcome
//	lameduck.check.results{lameduck.check.name,lameduck.check.outcome}  counter, {result}: verdicts
//	lameduck.check.duration{lameduck.check.name}                   histogram, s: ping durations (stalled excluded)
//	lameduck.probe.answers{http.route,http.response.status_code}   counter, {answer}: probe answers
//	lameduck.shutdown.step.duration{lameduck.shutdown.step}        gauge, s: window, hooks, http_drain, join, closers, total
//	lameduck.server.requests.cut                                   counter, {request}: requests closed by force at the teardown budget
//	lameduck.join.overruns                                         counter, {join}: background joins that ran out of budget
//	lameduck.background.tasks.abandoned                            counter, {task}: tasks still running when a join ran out
//	lameduck.maintenance                                           gauge, 1: 1 while the maintenance switch is on (from the first transition)
package ldotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/measure"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the Meter the metrics are
// created with: this module's import path, as OpenTelemetry's
// instrumentation-library convention asks.
const ScopeName = "github.com/lameduck/lameduck/contrib/otel"

// Instrument attaches lameduck's instruments to cfg, for the Lifecycle
// that lameduck.New (or worker.New, given the runner's Config.Lifecycle)
// then builds from it: it creates the instruments on mp's Meter for
// [ScopeName], registers the callback that reports the phase, the checks'
// last outcomes, the requests in flight and the maintenance switch at each
// collection, and chains its hook after cfg.OnTransition, which still
// hears every transition, first.
//
// Set your own OnTransition before calling Instrument: one set after it
// replaces the instruments' hook. Build one Lifecycle from cfg: the
// instruments count the transitions of every Lifecycle built from it, and
// read the phase, the requests in flight and the maintenance switch of the
// first one to report a transition (Transition.Lifecycle). Until that
// first transition (an event, a check's verdict, a probe's answer),
// lameduck.server.active_requests and lameduck.maintenance are not
// reported and the phase is starting.
//
// It returns an error when cfg or mp is nil, or wrapping the errors mp
// returned for the instruments or the callback; cfg is left as it was
// then. The instruments stay registered with mp when lameduck.New later
// refuses cfg.
func Instrument(cfg *lameduck.Config, mp metric.MeterProvider) error {
	if cfg == nil {
		return errors.New("lameduck: ldotel.Instrument: the Config is nil; pass the address of the Config you give lameduck.New")
	}
	m, err := newMetrics(mp)
	if err != nil {
		return err
	}
	m.tr.Attach(cfg)
	return nil
}

// metrics are lameduck's instruments on one Meter, for one instrumented
// Config. All methods are safe for concurrent use.
type metrics struct {
	tr *measure.Tracker

	phase     metric.Int64ObservableGauge
	inFlight  metric.Int64ObservableUpDownCounter
	maint     metric.Int64ObservableGauge
	status    metric.Int64ObservableGauge
	results   metric.Int64Counter
	durations metric.Float64Histogram
	probes    metric.Int64Counter
	steps     metric.Float64Gauge
	cut       metric.Int64Counter
	overruns  metric.Int64Counter
	abandoned metric.Int64Counter
}

// newMetrics creates the instruments on mp's Meter for [ScopeName] and
// registers the callback that reads the phase, the checks' last outcomes,
// the requests in flight and the maintenance switch at each collection. It
// returns an error when mp is nil, or wrapping the errors mp returned.
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		return nil, errors.New("lameduck: ldotel.Instrument: the MeterProvider is nil; pass otel.GetMeterProvider() or the SDK's provider")
	}
	meter := mp.Meter(ScopeName)
	m := &metrics{}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.phase, err = meter.Int64ObservableGauge(measure.Phase.OTel, metric.WithUnit(measure.Phase.Unit), metric.WithDescription(measure.Phase.Help))
	add(err)
	m.inFlight, err = meter.Int64ObservableUpDownCounter(measure.InFlight.OTel, metric.WithUnit(measure.InFlight.Unit), metric.WithDescription(measure.InFlight.Help))
	add(err)
	m.maint, err = meter.Int64ObservableGauge(measure.Maintenance.OTel, metric.WithUnit(measure.Maintenance.Unit), metric.WithDescription(measure.Maintenance.Help))
	add(err)
	m.status, err = meter.Int64ObservableGauge(measure.CheckStatus.OTel, metric.WithUnit(measure.CheckStatus.Unit), metric.WithDescription(measure.CheckStatus.Help))
	add(err)
	m.results, err = counter(meter, measure.CheckResults)
	add(err)
	m.durations, err = meter.Float64Histogram(measure.CheckDuration.OTel, metric.WithUnit(measure.CheckDuration.Unit),
		metric.WithDescription(measure.CheckDuration.Help), metric.WithExplicitBucketBoundaries(measure.Buckets...))
	add(err)
	m.probes, err = counter(meter, measure.ProbeAnswers)
	add(err)
	m.steps, err = meter.Float64Gauge(measure.StepDuration.OTel, metric.WithUnit(measure.StepDuration.Unit), metric.WithDescription(measure.StepDuration.Help))
	add(err)
	m.cut, err = counter(meter, measure.RequestsCut)
	add(err)
	m.overruns, err = counter(meter, measure.JoinOverruns)
	add(err)
	m.abandoned, err = counter(meter, measure.TasksAbandoned)
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lameduck: ldotel.Instrument: %w", err)
	}
	m.tr = measure.NewTracker(sink{m})
	if _, err := meter.RegisterCallback(m.collect, m.phase, m.inFlight, m.maint, m.status); err != nil {
		return nil, fmt.Errorf("lameduck: ldotel.Instrument: %w", err)
	}
	return m, nil
}

func counter(meter metric.Meter, m measure.Metric) (metric.Int64Counter, error) {
	return meter.Int64Counter(m.OTel, metric.WithUnit(m.Unit), metric.WithDescription(m.Help))
}

// collect reports the observable instruments.
func (m *metrics) collect(_ context.Context, o metric.Observer) error {
	cur := m.tr.Phase()
	for _, p := range measure.Phases {
		v := int64(0)
		if p == cur {
			v = 1
		}
		o.ObserveInt64(m.phase, v, metric.WithAttributes(attribute.String(measure.LabelPhase.OTel, p.String())))
	}
	if n, ok := m.tr.InFlight(); ok {
		o.ObserveInt64(m.inFlight, int64(n))
	}
	if v, ok := m.tr.Maintenance(); ok {
		o.ObserveInt64(m.maint, int64(v))
	}
	for name, st := range m.tr.Checks() {
		for _, oc := range measure.Outcomes {
			v := int64(0)
			if oc == st.Outcome {
				v = 1
			}
			o.ObserveInt64(m.status, v, metric.WithAttributes(
				attribute.String(measure.LabelCheck.OTel, name),
				attribute.Bool(measure.LabelCritical.OTel, st.Critical),
				attribute.String(measure.LabelOutcome.OTel, string(oc))))
		}
	}
	return nil
}

// sink records the Tracker's counts in the instruments. The hook has no
// context of its own: the records use context.Background().
type sink struct{ m *metrics }

func (s sink) CheckResult(check string, o health.Outcome) {
	s.m.results.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(measure.LabelCheck.OTel, check), attribute.String(measure.LabelOutcome.OTel, string(o))))
}

func (s sink) CheckDuration(check string, d time.Duration) {
	s.m.durations.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String(measure.LabelCheck.OTel, check)))
}

func (s sink) ProbeAnswer(path string, code int) {
	s.m.probes.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(measure.LabelPath.OTel, path), attribute.Int(measure.LabelCode.OTel, code)))
}

func (s sink) StepEnded(step string, d time.Duration) {
	s.m.steps.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String(measure.LabelStep.OTel, step)))
}

func (s sink) Cut(n int) { s.m.cut.Add(context.Background(), int64(n)) }

func (s sink) Abandoned(n int) {
	s.m.overruns.Add(context.Background(), 1)
	s.m.abandoned.Add(context.Background(), int64(n))
}
