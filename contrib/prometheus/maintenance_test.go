package ldprometheus_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lameduck/lameduck"
	"github.com/prometheus/client_golang/prometheus"
)

// lameduck_maintenance follows the maintenance switch at each scrape: 0,
// 1 once POST /maintenance/on is accepted, 0 again after /off. It is
// exported from the Lifecycle's first transition (here the first probe).
func TestMaintenanceGauge(t *testing.T) {
	const token = "s3cret-token-long-enough"
	reg := prometheus.NewPedanticRegistry()
	lc, _ := instrumented(t, reg, lameduck.Config{Maintenance: true, PreStopToken: token})
	probe := func(method, path string) {
		t.Helper()
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("X-Lameduck-Token", token)
		rec := httptest.NewRecorder()
		lc.ProbeHandler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
	}
	if _, ok := value(gather(t, reg), "lameduck_maintenance", nil); ok {
		t.Error("lameduck_maintenance exported before the Lifecycle's first transition")
	}
	probe(http.MethodGet, "/healthz")
	want(t, gather(t, reg), "lameduck_maintenance", nil, 0)
	probe(http.MethodPost, "/maintenance/on")
	want(t, gather(t, reg), "lameduck_maintenance", nil, 1)
	probe(http.MethodPost, "/maintenance/off")
	want(t, gather(t, reg), "lameduck_maintenance", nil, 0)
}
