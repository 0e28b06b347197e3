package testsupport

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/lameducktest"
)

// MetricsTraffic gives the metrics integrations' tests (contrib/otel,
// contrib/prometheus) the same traffic to count: it adds to lc the checks
// "db" (critical, always ok) and "cache" (not critical, always failing
// "down"), registers an http.Server with handler on a loopback listener,
// starts lc (lameducktest.Start), and asks through client GET /readyz
// twice, then /healthz, /readyz/db and /startupz once each. It returns the
// server's URL and the wait function Start returned. It fails t when a
// step fails.
func MetricsTraffic(t testing.TB, lc *lameduck.Lifecycle, handler http.Handler, client *http.Client) (base string, wait func() error) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return nil }}))
	must(lc.AddCheck(health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("down") }}))
	ln, base := Listen(t)
	must(lc.AddServer(&http.Server{Handler: handler}, ln))
	wait = lameducktest.Start(t, lc)
	for _, p := range []string{"/readyz", "/readyz", "/healthz", "/readyz/db", "/startupz"} {
		resp, err := client.Get(base + p)
		must(err)
		resp.Body.Close()
	}
	return base, wait
}
