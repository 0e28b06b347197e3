package ldprometheus_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/prometheus/client_golang/prometheus"
)

// noEnv makes a test ignore the LAMEDUCK_* variables of the machine.
func noEnv(string) (string, bool) { return "", false }

// Instrument wires everything in one call on the Config: the series are
// registered, the in-flight and phase gauges read the Lifecycle that
// lameduck.New builds from the Config, and each transition reaches the
// application's own OnTransition first, then the series.
func TestInstrumentWiresInOneCall(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var mu sync.Mutex
	var heard []lameduck.TransitionKind
	cfg := lameduck.Config{LookupEnv: noEnv, IgnoreSignals: true,
		OnTransition: func(tr lameduck.Transition) { mu.Lock(); heard = append(heard, tr.Kind); mu.Unlock() }}
	if err := ldprometheus.Instrument(&cfg, reg); err != nil {
		t.Fatal(err)
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg)
	want(t, fams, "lameduck_phase", map[string]string{"phase": "starting"}, 1)
	if _, ok := value(fams, "lameduck_requests_in_flight", nil); ok {
		t.Error("lameduck_requests_in_flight exported before the Lifecycle's first transition")
	}
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before Run: %d, want 503 starting", rec.Code)
	}
	fams = gather(t, reg)
	want(t, fams, "lameduck_phase", map[string]string{"phase": "starting"}, 1)
	want(t, fams, "lameduck_requests_in_flight", nil, 0) // read from lc since the probe's transition
	want(t, fams, "lameduck_maintenance", nil, 0)
	want(t, fams, "lameduck_probe_answers_total", map[string]string{"path": "/readyz", "code": "503"}, 1)
	mu.Lock()
	defer mu.Unlock()
	probes := 0
	for _, k := range heard {
		if k == lameduck.TransitionProbe {
			probes++
		}
	}
	if probes != 1 {
		t.Errorf("the application's OnTransition heard %d probe transitions (%v), want 1", probes, heard)
	}
}

// A nil Config, a nil registry and a registry that already holds
// lameduck's series are errors, which leave the Config as it was.
func TestInstrumentErrors(t *testing.T) {
	cfg := testsupport.InstrumentRefusals(t, ldprometheus.Instrument, prometheus.Registerer(prometheus.NewPedanticRegistry()), "Registerer")
	reg := prometheus.NewPedanticRegistry()
	if err := ldprometheus.Instrument(&lameduck.Config{}, reg); err != nil {
		t.Fatal(err)
	}
	err := ldprometheus.Instrument(cfg, reg)
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("a second Instrument on the same registry: %v; want a prometheus.AlreadyRegisteredError", err)
	}
	if cfg.OnTransition != nil {
		t.Error("a refused Instrument set OnTransition")
	}
}
