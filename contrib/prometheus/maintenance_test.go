package ldprometheus_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/prometheus/client_golang/prometheus"
)

// lameduck_maintenance follows the maintenance switch at each scrape: 0,
// 1 once POST /maintenance/on is accepted, 0 again after /off.
func TestMaintenanceGauge(t *testing.T) {
	const token = "s3cret-token-long-enough"
	col := ldprometheus.NewCollector()
	lc, _ := testsupport.NewLifecycle(t, lameduck.Config{Maintenance: true, PreStopToken: token})
	col.Watch(lc)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	turn := func(path string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Header.Set(lameduck.PreStopTokenHeader, token)
		rec := httptest.NewRecorder()
		lc.ProbeHandler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	want(t, gather(t, reg), "lameduck_maintenance", nil, 0)
	turn("/maintenance/on")
	want(t, gather(t, reg), "lameduck_maintenance", nil, 1)
	turn("/maintenance/off")
	want(t, gather(t, reg), "lameduck_maintenance", nil, 0)
}
