package ldotel_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldotel "github.com/lameduck/lameduck/contrib/otel"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/measure"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reader is an SDK MeterProvider with an in-memory ManualReader.
type reader struct {
	r  *sdkmetric.ManualReader
	mp *sdkmetric.MeterProvider
}

func newReader(t *testing.T) reader {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return reader{r, mp}
}

// collect returns every metric the reader holds, by name.
func (r reader) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ldotel.ScopeName {
			t.Fatalf("scope %q; want %q", sm.Scope.Name, ldotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// value returns the value of the point of ms[name] whose attributes include
// want (for a histogram, its count), and whether there is one.
func value(ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) (float64, bool) {
	switch d := ms[name].Data.(type) {
	case metricdata.Gauge[int64]:
		return first(d.DataPoints, dataPoint, want)
	case metricdata.Gauge[float64]:
		return first(d.DataPoints, dataPoint, want)
	case metricdata.Sum[int64]:
		return first(d.DataPoints, dataPoint, want)
	case metricdata.Histogram[float64]:
		return first(d.DataPoints, func(p metricdata.HistogramDataPoint[float64]) (attribute.Set, float64) {
			return p.Attributes, float64(p.Count)
		}, want)
	}
	return 0, false
}

// first returns the value of the first of points whose attributes, as read
// reads them with its value, include want, and whether there is one.
func first[P any](points []P, read func(P) (attribute.Set, float64), want []attribute.KeyValue) (float64, bool) {
next:
	for _, p := range points {
		set, v := read(p)
		for _, kv := range want {
			if got, ok := set.Value(kv.Key); !ok || got != kv.Value {
				continue next
			}
		}
		return v, true
	}
	return 0, false
}

// dataPoint reads a gauge's or a sum's point.
func dataPoint[N int64 | float64](p metricdata.DataPoint[N]) (attribute.Set, float64) {
	return p.Attributes, float64(p.Value)
}

func want(t *testing.T, ms map[string]metricdata.Metrics, name string, v float64, attrs ...attribute.KeyValue) {
	t.Helper()
	got, ok := value(ms, name, attrs...)
	if !ok || got != v {
		t.Errorf("%s%v = %v (present %v), want %v", name, attrs, got, ok, v)
	}
}

// A served Lifecycle built from a Config wired by ldotel.Instrument, read through the SDK's in-memory
// reader: the phase, the checks, the probes and the requests in flight
// while serving; during the teardown, with a request holding it, the
// stopping phase and the 2s window on the fake clock; after the exit, every
// step of the shutdown.
func TestShutdownThroughTheManualReader(t *testing.T) {
	rd := newReader(t)
	var heard []lameduck.TransitionKind // the application's own hook still hears everything, first
	var heardMu sync.Mutex
	cfg := lameduck.Config{ShutdownDelay: 2 * time.Second, ShutdownTeardown: 5 * time.Second,
		CheckTimeout: 10 * time.Second, // "ok" and "error" even when a loaded machine delays a ping past 1s
		OnTransition: func(tr lameduck.Transition) { heardMu.Lock(); heard = append(heard, tr.Kind); heardMu.Unlock() },
	}
	clk := lameducktest.Configure(t, &cfg)
	if err := ldotel.Instrument(&cfg, rd.mp); err != nil {
		t.Fatal(err)
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	held, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /held", func(w http.ResponseWriter, r *http.Request) { close(held); <-release })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	base, wait := testsupport.MetricsTraffic(t, lc, mux, client)
	ms := rd.collect(t)
	want(t, ms, "lameduck.phase", 1, attribute.String("lameduck.phase", "serving"))
	want(t, ms, "lameduck.phase", 0, attribute.String("lameduck.phase", "starting"))
	want(t, ms, "lameduck.server.active_requests", 0)
	want(t, ms, "lameduck.probe.answers", 2, attribute.String("http.route", "/readyz"), attribute.Int("http.response.status_code", 200))
	want(t, ms, "lameduck.probe.answers", 1, attribute.String("http.route", "/readyz/*"), attribute.Int("http.response.status_code", 200))
	want(t, ms, "lameduck.probe.answers", 1, attribute.String("http.route", "/healthz"), attribute.Int("http.response.status_code", 200))
	// Each ping reports after its probe has its answer, asynchronously:
	// collect until the checks' points have their final values (the
	// counters only grow), then assert them. Three pings of db, two of
	// cache.
	checks := []struct {
		name  string
		v     float64
		attrs []attribute.KeyValue
	}{
		{"lameduck.check.results", 3, []attribute.KeyValue{attribute.String("lameduck.check.name", "db"), attribute.String("lameduck.check.outcome", "ok")}},
		{"lameduck.check.results", 2, []attribute.KeyValue{attribute.String("lameduck.check.name", "cache"), attribute.String("lameduck.check.outcome", "error")}},
		{"lameduck.check.status", 1, []attribute.KeyValue{attribute.String("lameduck.check.name", "cache"), attribute.Bool("lameduck.check.critical", false), attribute.String("lameduck.check.outcome", "error")}},
		{"lameduck.check.status", 0, []attribute.KeyValue{attribute.String("lameduck.check.name", "cache"), attribute.String("lameduck.check.outcome", "ok")}},
		{"lameduck.check.status", 1, []attribute.KeyValue{attribute.String("lameduck.check.name", "db"), attribute.Bool("lameduck.check.critical", true), attribute.String("lameduck.check.outcome", "ok")}},
		{"lameduck.check.duration", 3, []attribute.KeyValue{attribute.String("lameduck.check.name", "db")}},
		{"lameduck.check.duration", 2, []attribute.KeyValue{attribute.String("lameduck.check.name", "cache")}},
	}
	reported := func() bool {
		for _, c := range checks {
			if got, ok := value(ms, c.name, c.attrs...); !ok || got != c.v {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !reported() && time.Now().Before(deadline); { // a hang guard
		time.Sleep(10 * time.Millisecond)
		ms = rd.collect(t)
	}
	for _, c := range checks {
		want(t, ms, c.name, c.v, c.attrs...)
	}

	// The teardown, held by a request in flight.
	answered := make(chan error, 1)
	go func() {
		resp, err := client.Get(base + "/held")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	<-held
	lameducktest.EndWindow(t, lc, clk)
	ms = rd.collect(t)
	want(t, ms, "lameduck.phase", 1, attribute.String("lameduck.phase", "stopping"))
	want(t, ms, "lameduck.phase", 0, attribute.String("lameduck.phase", "serving"))
	want(t, ms, "lameduck.shutdown.step.duration", 2, attribute.String("lameduck.shutdown.step", "window"))
	want(t, ms, "lameduck.server.active_requests", 1)
	close(release)
	must(<-answered)
	must(wait())
	ms = rd.collect(t)
	want(t, ms, "lameduck.phase", 1, attribute.String("lameduck.phase", "stopped"))
	want(t, ms, "lameduck.server.active_requests", 0)
	for _, step := range []string{"window", "hooks", "http_drain", "join", "closers", "total"} {
		if _, ok := value(ms, "lameduck.shutdown.step.duration", attribute.String("lameduck.shutdown.step", step)); !ok {
			t.Errorf("no shutdown step %s", step)
		}
	}
	heardMu.Lock()
	defer heardMu.Unlock()
	if !slices.Contains(heard, lameduck.TransitionProbe) || !slices.Contains(heard, lameduck.TransitionEvent) {
		t.Errorf("the application's OnTransition heard %v; want the probes and the events too", heard)
	}
}

// Every metric of the list contrib/prometheus exports too is reported,
// under its OpenTelemetry name and unit, as the kind of instrument the list
// says, and nothing else is.
func TestEveryMeasureIsReported(t *testing.T) {
	rd := newReader(t)
	var cfg lameduck.Config // its OnTransition hears the transitions the test makes up
	if err := ldotel.Instrument(&cfg, rd.mp); err != nil {
		t.Fatal(err)
	}
	if ms := rd.collect(t); len(ms) == 0 {
		t.Fatal("nothing reported before the first transition")
	} else if _, ok := ms["lameduck.server.active_requests"]; ok {
		t.Error("lameduck.server.active_requests reported before the Lifecycle's first transition")
	}
	lc, _ := testsupport.NewLifecycle(t, lameduck.Config{}) // the Lifecycle the transitions name
	at := time.Now()
	for _, tr := range []lameduck.Transition{
		{Kind: lameduck.TransitionCheck, Check: health.Result{Name: "db", Outcome: health.OutcomeOK, Duration: time.Millisecond}},
		{Kind: lameduck.TransitionProbe, Path: "/readyz/db", Code: 503},
		{Kind: lameduck.TransitionEvent, Event: lc.Events().ShutdownInitiated, At: at, Phase: lameduck.PhaseDraining},
		{Kind: lameduck.TransitionEvent, Event: lc.Events().WindowEnded, At: at.Add(time.Second), Phase: lameduck.PhaseStopping},
		{Kind: lameduck.TransitionCut, Count: 3},
		{Kind: lameduck.TransitionAbandoned, Count: 2},
	} {
		tr.Lifecycle = lc
		cfg.OnTransition(tr)
	}
	ms := rd.collect(t)
	var names []string
	for _, mm := range measure.All {
		names = append(names, mm.OTel)
		got, ok := ms[mm.OTel]
		if !ok {
			t.Errorf("%s is not reported", mm.OTel)
			continue
		}
		if got.Unit != mm.Unit || got.Description != mm.Help {
			t.Errorf("%s: unit %q, description %q; want %q, %q", mm.OTel, got.Unit, got.Description, mm.Unit, mm.Help)
		}
		var kind measure.Kind
		switch d := got.Data.(type) {
		case metricdata.Gauge[int64], metricdata.Gauge[float64]:
			kind = measure.Gauge
		case metricdata.Sum[int64]:
			kind = measure.UpDownCounter
			if d.IsMonotonic {
				kind = measure.Counter
			}
		case metricdata.Histogram[float64]:
			kind = measure.Histogram
			if b := d.DataPoints[0].Bounds; !slices.Equal(b, measure.Buckets) {
				t.Errorf("%s: bounds %v; want %v", mm.OTel, b, measure.Buckets)
			}
		}
		if kind != mm.Kind {
			t.Errorf("%s: %T; want kind %d", mm.OTel, got.Data, mm.Kind)
		}
	}
	for name := range ms {
		if !slices.Contains(names, name) {
			t.Errorf("%s is reported but not in the shared list", name)
		}
	}
	want(t, ms, "lameduck.server.requests.cut", 3)
	want(t, ms, "lameduck.join.overruns", 1)
	want(t, ms, "lameduck.background.tasks.abandoned", 2)
	want(t, ms, "lameduck.probe.answers", 1, attribute.String("http.route", "/readyz/*"), attribute.Int("http.response.status_code", 503))
	want(t, ms, "lameduck.shutdown.step.duration", 1, attribute.String("lameduck.shutdown.step", "window"))
	// The later of the Lifecycle's phase (starting: it never ran) and the
	// one the last event led to.
	want(t, ms, "lameduck.phase", 1, attribute.String("lameduck.phase", "stopping"))
	want(t, ms, "lameduck.server.active_requests", 0)
	want(t, ms, "lameduck.maintenance", 0)
}

// A nil Config and a nil MeterProvider are errors, which leave the Config
// as it was.
func TestBadArguments(t *testing.T) {
	testsupport.InstrumentRefusals(t, ldotel.Instrument, metric.MeterProvider(newReader(t).mp), "MeterProvider")
}
