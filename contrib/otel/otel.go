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
// call wires it:
//
//	lc, err := ldotel.New(lameduck.Config{}, otel.GetMeterProvider())
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
//	lameduck.server.active_requests                                up-down counter, {request}: application requests in flight (after Watch)
//	lameduck.check.status{lameduck.check.name,lameduck.check.critical,lameduck.check.outcome}  gauge, 1: each check's last outcome
//	lameduck.check.results{lameduck.check.name,lameduck.check.outcome}  counter, {result}: verdicts
//	lameduck.check.duration{lameduck.check.name}                   histogram, s: ping durations (stalled excluded)
//	lameduck.probe.answers{http.route,http.response.status_code}   counter, {answer}: probe answers
//	lameduck.shutdown.step.duration{lameduck.shutdown.step}        gauge, s: window, hooks, http_drain, join, closers, total
//	lameduck.server.requests.cut                                   counter, {request}: requests closed by force at the teardown budget
//	lameduck.join.overruns                                         counter, {join}: background joins that ran out of budget
//	lameduck.background.tasks.abandoned                            counter, {task}: tasks still running when a join ran out
//	lameduck.maintenance                                           gauge, 1: 1 while the maintenance switch is on (after Watch)
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

// New returns a Lifecycle configured by cfg (see lameduck.New) whose
// metrics are recorded through mp, wired in one call: it creates the
// instruments ([NewMetrics]), chains [Metrics.Observe] after
// cfg.OnTransition (which still hears every transition, first), creates
// the Lifecycle and calls [Metrics.Watch] with it.
//
// It returns NewMetrics' error (a nil mp, or an instrument mp refused), or
// lameduck.New's (an invalid setting); nothing is created then.
func New(cfg lameduck.Config, mp metric.MeterProvider) (*lameduck.Lifecycle, error) {
	m, err := NewMetrics(mp)
	if err != nil {
		return nil, err
	}
	if prev := cfg.OnTransition; prev != nil {
		cfg.OnTransition = func(t lameduck.Transition) { prev(t); m.Observe(t) }
	} else {
		cfg.OnTransition = m.Observe
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		_ = m.Unregister()
		return nil, err
	}
	m.Watch(lc)
	return lc, nil
}

// Metrics are lameduck's instruments on one Meter, for one Lifecycle. Use
// [New] to wire them in one call, or [NewMetrics], Config.OnTransition =
// m.Observe and m.Watch(lc) to compose them with another OnTransition hook
// (contrib/prometheus's Collector, say). The zero value is not usable. All
// methods are safe for concurrent use.
type Metrics struct {
	tr  *measure.Tracker
	reg metric.Registration

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

// NewMetrics creates the instruments on mp's Meter for [ScopeName] and
// registers the callback that reads the phase, the checks' last outcomes
// and the requests in flight at each collection. It returns an error when
// mp is nil, or wrapping the first error mp returned for an instrument.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("lameduck: ldotel.NewMetrics: the MeterProvider is nil; pass otel.GetMeterProvider() or the SDK's provider")
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{}
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
		return nil, fmt.Errorf("lameduck: ldotel.NewMetrics: %w", err)
	}
	m.tr = measure.NewTracker(sink{m})
	m.reg, err = meter.RegisterCallback(m.collect, m.phase, m.inFlight, m.maint, m.status)
	if err != nil {
		return nil, fmt.Errorf("lameduck: ldotel.NewMetrics: %w", err)
	}
	return m, nil
}

func counter(meter metric.Meter, m measure.Metric) (metric.Int64Counter, error) {
	return meter.Int64Counter(m.OTel, metric.WithUnit(m.Unit), metric.WithDescription(m.Help))
}

// Watch makes the Metrics read lc's phase and in-flight requests at each
// collection. Without it, lameduck.phase follows the events Observe hears
// and lameduck.server.active_requests is not reported.
func (m *Metrics) Watch(lc *lameduck.Lifecycle) { m.tr.Watch(lc) }

// Observe records t. Pass it as lameduck.Config.OnTransition ([New] does).
// It does not block beyond the instruments' own locks.
func (m *Metrics) Observe(t lameduck.Transition) { m.tr.Observe(t) }

// Unregister removes the collection callback: the gauges and the up-down
// counter are no longer reported. It returns the MeterProvider's error.
func (m *Metrics) Unregister() error { return m.reg.Unregister() }

// collect reports the observable instruments.
func (m *Metrics) collect(_ context.Context, o metric.Observer) error {
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
type sink struct{ m *Metrics }

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
