package ldprometheus_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/measure"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scrape GETs url and parses the exposition with the Prometheus text
// parser, failing t on any error.
func scrape(t testing.TB, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// value returns the value of the series of fam whose labels include want,
// and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func want(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string, v float64) {
	t.Helper()
	got, ok := value(fams, name, labels)
	if !ok || got != v {
		t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
	}
}

// A served Lifecycle scraped over HTTP: the phase, the checks, the probes,
// in flight; then the shutdown steps.
func TestScrape(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	lc, clk := instrumented(t, reg, lameduck.Config{ShutdownDelay: 2 * time.Second,
		CheckTimeout: 10 * time.Second}) // "ok" and "error" even when a loaded machine delays a ping past 1s
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	base, wait := testsupport.MetricsTraffic(t, lc, mux, client)
	fams := scrape(t, client, base+"/metrics")
	want(t, fams, "lameduck_phase", map[string]string{"phase": "serving"}, 1)
	want(t, fams, "lameduck_phase", map[string]string{"phase": "starting"}, 0)
	want(t, fams, "lameduck_requests_in_flight", nil, 1) // the scrape itself
	want(t, fams, "lameduck_probe_answers_total", map[string]string{"path": "/readyz", "code": "200"}, 2)
	want(t, fams, "lameduck_probe_answers_total", map[string]string{"path": "/readyz/*", "code": "200"}, 1)
	want(t, fams, "lameduck_probe_answers_total", map[string]string{"path": "/healthz", "code": "200"}, 1)
	// Each ping reports after its probe has its answer, asynchronously and
	// in no set order, and one report updates several series one after
	// the other: scrape until every series of the checks has its final
	// value (the counters only grow, so none is passed over), then assert
	// them all. Three pings of db (two /readyz, /readyz/db), two of cache.
	checks := []struct {
		name   string
		labels map[string]string
		v      float64
	}{
		{"lameduck_check_results_total", map[string]string{"check": "db", "outcome": "ok"}, 3},
		{"lameduck_check_results_total", map[string]string{"check": "cache", "outcome": "error"}, 2},
		{"lameduck_check_status", map[string]string{"check": "cache", "critical": "false", "outcome": "error"}, 1},
		{"lameduck_check_status", map[string]string{"check": "cache", "critical": "false", "outcome": "ok"}, 0},
		{"lameduck_check_status", map[string]string{"check": "db", "critical": "true", "outcome": "ok"}, 1},
		{"lameduck_check_duration_seconds", map[string]string{"check": "db"}, 3},
		{"lameduck_check_duration_seconds", map[string]string{"check": "cache"}, 2},
	}
	reported := func() bool {
		for _, c := range checks {
			if got, ok := value(fams, c.name, c.labels); !ok || got != c.v {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !reported() && time.Now().Before(deadline); { // a hang guard
		time.Sleep(10 * time.Millisecond)
		fams = scrape(t, client, base+"/metrics")
	}
	for _, c := range checks {
		want(t, fams, c.name, c.labels, c.v)
	}

	// The window: draining, and its length on the fake clock.
	lameducktest.EndWindow(t, lc, clk)
	must(wait())
	fams = gather(t, reg)
	want(t, fams, "lameduck_phase", map[string]string{"phase": "stopped"}, 1)
	want(t, fams, "lameduck_shutdown_step_duration_seconds", map[string]string{"step": "window"}, 2)
	for _, step := range []string{"hooks", "http_drain", "join", "closers", "total"} {
		if _, ok := value(fams, "lameduck_shutdown_step_duration_seconds", map[string]string{"step": step}); !ok {
			t.Errorf("no shutdown step %s", step)
		}
	}
}

// instrumented returns a Lifecycle built from cfg instrumented with reg, on
// lameducktest's fake clock, and the clock.
func instrumented(t testing.TB, reg prometheus.Registerer, cfg lameduck.Config) (*lameduck.Lifecycle, *lameducktest.Clock) {
	t.Helper()
	if err := ldprometheus.Instrument(&cfg, reg); err != nil {
		t.Fatal(err)
	}
	return testsupport.NewLifecycle(t, cfg)
}

// observing returns a Config instrumented with a new registry, and the
// registry: a test hands cfg.OnTransition the transitions it makes up.
func observing(t testing.TB) (lameduck.Config, *prometheus.Registry) {
	t.Helper()
	var cfg lameduck.Config
	reg := prometheus.NewPedanticRegistry()
	if err := ldprometheus.Instrument(&cfg, reg); err != nil {
		t.Fatal(err)
	}
	return cfg, reg
}

func gather(t testing.TB, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	list, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range list {
		fams[f.GetName()] = f
	}
	return fams
}

// The requests cut and the tasks abandoned, as the core reports them.
func TestCutAndAbandoned(t *testing.T) {
	cfg, reg := observing(t)
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionCut, Count: 3})
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionAbandoned, Count: 2})
	fams := gather(t, reg)
	want(t, fams, "lameduck_requests_cut_total", nil, 3)
	want(t, fams, "lameduck_join_overruns_total", nil, 1)
	want(t, fams, "lameduck_background_tasks_abandoned_total", nil, 2)
}

// promtool's linter (the same rules as `promtool check metrics`) finds
// nothing to say about any series.
func TestLint(t *testing.T) {
	cfg, reg := observing(t)
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionCheck, Check: health.Result{Name: "db", Outcome: health.OutcomeOK, Duration: time.Millisecond}})
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionProbe, Path: "/readyz", Code: 200})
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionCut, Count: 1})
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionAbandoned, Count: 1})
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// Every metric of the list contrib/otel reports too is exported, under its
// Prometheus name and help, as the type the list says, and nothing else is.
func TestEveryMeasureIsExported(t *testing.T) {
	cfg, reg := observing(t)
	lc, _ := testsupport.NewLifecycle(t, lameduck.Config{}) // the Lifecycle the transitions name
	at := time.Now()
	for _, tr := range []lameduck.Transition{
		{Kind: lameduck.TransitionCheck, Check: health.Result{Name: "db", Outcome: health.OutcomeOK, Duration: time.Millisecond}},
		{Kind: lameduck.TransitionProbe, Path: "/readyz", Code: 200},
		{Kind: lameduck.TransitionEvent, Event: lc.Events().ShutdownInitiated, At: at},
		{Kind: lameduck.TransitionEvent, Event: lc.Events().WindowEnded, At: at.Add(time.Second)},
		{Kind: lameduck.TransitionCut, Count: 1},
		{Kind: lameduck.TransitionAbandoned, Count: 1},
	} {
		tr.Lifecycle = lc
		cfg.OnTransition(tr)
	}
	fams := gather(t, reg)
	types := map[measure.Kind]dto.MetricType{measure.Gauge: dto.MetricType_GAUGE, measure.UpDownCounter: dto.MetricType_GAUGE,
		measure.Counter: dto.MetricType_COUNTER, measure.Histogram: dto.MetricType_HISTOGRAM}
	listed := map[string]bool{}
	for _, m := range measure.All {
		listed[m.Prom] = true
		f := fams[m.Prom]
		if f == nil {
			t.Errorf("%s is not exported", m.Prom)
			continue
		}
		if f.GetType() != types[m.Kind] || f.GetHelp() != m.Help {
			t.Errorf("%s: %v %q; want %v %q", m.Prom, f.GetType(), f.GetHelp(), types[m.Kind], m.Help)
		}
	}
	for name := range fams {
		if !listed[name] {
			t.Errorf("%s is exported but not in the shared list", name)
		}
	}
}
