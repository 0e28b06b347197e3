package ldprometheus_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// noEnv makes a test ignore the LAMEDUCK_* variables of the machine.
func noEnv(string) (string, bool) { return "", false }

// New wires everything in one call: the series are registered, the phase
// and in-flight gauges read the Lifecycle (Watch), and each transition
// reaches the application's own OnTransition first, then the series.
func TestNewWiresInOneCall(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var mu sync.Mutex
	var heard []lameduck.TransitionKind
	lc, err := ldprometheus.New(lameduck.Config{LookupEnv: noEnv, IgnoreSignals: true,
		OnTransition: func(tr lameduck.Transition) { mu.Lock(); heard = append(heard, tr.Kind); mu.Unlock() }}, reg)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before Run: %d, want 503 starting", rec.Code)
	}
	fams := gather(t, reg)
	want(t, fams, "lameduck_phase", map[string]string{"phase": "starting"}, 1)
	want(t, fams, "lameduck_requests_in_flight", nil, 0) // exported only after Watch
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

// A nil registry, a registry that already holds lameduck's series and an
// invalid setting are errors; after a refused setting nothing stays
// registered, so a second New on the same registry succeeds.
func TestNewErrors(t *testing.T) {
	if _, err := ldprometheus.New(lameduck.Config{LookupEnv: noEnv}, nil); err == nil {
		t.Error("New with a nil Registerer = nil error")
	}
	reg := prometheus.NewPedanticRegistry()
	_, err := ldprometheus.New(lameduck.Config{LookupEnv: func(k string) (string, bool) {
		if k == "LAMEDUCK_SHUTDOWN_DELAY" {
			return "5", true
		}
		return "", false
	}}, reg)
	if !errors.Is(err, lameduck.ErrInvalidConfig) {
		t.Errorf("New with LAMEDUCK_SHUTDOWN_DELAY=5: %v; want ErrInvalidConfig", err)
	}
	if _, err := ldprometheus.New(lameduck.Config{LookupEnv: noEnv}, reg); err != nil {
		t.Fatalf("New after a refused setting: %v; want the series registered afresh", err)
	}
	_, err = ldprometheus.New(lameduck.Config{LookupEnv: noEnv}, reg)
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("a second New on the same registry: %v; want a prometheus.AlreadyRegisteredError", err)
	}
}
