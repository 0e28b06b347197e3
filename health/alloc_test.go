//go:build !race

package health_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lameduck/lameduck/health"
)

// discardWriter is a ResponseWriter that keeps nothing between requests
// but its header map, cleared each time, as a server's would be.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// A healthy probe of three checks that return at once, through
// ServeReadiness, body included, allocates two objects: the probe's pings
// (one slice) and the goroutine that runs them. Headers are prepared once,
// the body and the results come from a pool, the checks' contexts are made
// only if a check asks for Done. (Outside -race, which allocates on its
// own.)
func TestServeReadinessHealthyProbeAllocs(t *testing.T) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	for _, name := range []string{"db", "cache", "queue"} {
		mustAdd(t, c, health.Check{Name: name, Func: func(context.Context) error { return nil }})
	}
	info := &health.Info{Version: "v1", Commit: "c"}
	r := httptest.NewRequest("GET", "/readyz", nil)
	extra := map[string]any{"phase": "serving"}
	w := &discardWriter{h: http.Header{}}
	serve := func() {
		clear(w.h)
		c.ServeReadiness(w, r, info, "", extra)
	}
	serve()
	if got := w.h.Get("Content-Length"); got == "" || w.h.Get("Content-Type") != "application/json" || w.h.Get("Vary") != "Accept" {
		t.Fatalf("headers %v", w.h)
	}
	if n := testing.AllocsPerRun(1000, serve); n > 2 {
		t.Fatalf("a healthy probe of three trivial checks allocates %.1f times, want at most 2", n)
	}
}
