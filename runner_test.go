package lameduck_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/extend"
)

// A Lifecycle that nothing serves the probes of says so, and never claims
// that /readyz answers.
func TestNoListenerNoProbeClaims(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	h.start(t)
	h.lc.BeginShutdown("test")
	h.waitOK(t)
	logs := h.logs.String()
	if !strings.Contains(logs, "no listener serves the probes") || !strings.Contains(logs, "LAMEDUCK_PROBE_ADDR") {
		t.Fatalf("logs do not say nothing serves the probes:\n%s", logs)
	}
	if strings.Contains(logs, "/readyz now") {
		t.Fatalf("logs claim /readyz answers:\n%s", logs)
	}
}

// A probe listener of its own serves a Lifecycle without servers.
func TestProbeAddrServesWithoutServers(t *testing.T) {
	h := newHarness(t, lameduck.Config{ProbeAddr: "127.0.0.1:0"})
	h.start(t)
	if strings.Contains(h.logs.String(), "no listener serves the probes") {
		t.Fatalf("warned with a probe listener:\n%s", h.logs)
	}
	h.lc.BeginShutdown("test")
	h.waitOK(t)
}

// An extension's probe answerer (a runner's: internal/extend) answers
// first; the Lifecycle's answer stands otherwise.
func TestExtensionAnswersProbes(t *testing.T) {
	stalled := false
	cfg := lameduck.Config{Extension: &extend.Extension{
		Answer: func(liveness bool, p int32) (health.Report, bool) {
			if liveness && stalled {
				return health.Report{Status: health.StatusStalled}, true
			}
			return health.Report{}, false
		},
	}}
	h := newHarness(t, cfg)
	ask := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := ask("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	stalled = true
	if code, body := ask("/healthz"); code != 503 || !strings.Contains(body, `"status":"stalled"`) || !strings.Contains(body, `"phase":"starting"`) {
		t.Fatalf("healthz %d %s", code, body)
	}
}

// An extension's drain wait (a runner's jobs in flight: internal/extend)
// holds the window until it returns, within the bound, DrainTimeout.
func TestDrainWaitHoldsTheWindow(t *testing.T) {
	release := make(chan struct{})
	cfg := lameduck.Config{ProbeAddr: "127.0.0.1:0", DrainTimeout: time.Hour, Extension: &extend.Extension{
		Window: "test drain bound",
		Waits: []extend.Wait{{Name: "job", Fn: func(ctx context.Context) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}}},
	}}
	h := newHarness(t, cfg)
	h.start(t)
	h.lc.BeginShutdown("test")
	h.timers(1) // the bound
	if n := h.clock.Advance(59 * time.Minute); n != 0 || h.lc.Events().WindowEnded.Fired() {
		t.Fatalf("the window ended while the wait held it (%d timer(s) fired)", n)
	}
	close(release)
	await(t, h.lc.Events().WindowEnded)
	h.waitOK(t)
	h.logged(t, "drain waits done", "logs")
}

// The probe listener carries the application's extra handler (a /metrics)
// beside the probes.
func TestProbeListenerHandler(t *testing.T) {
	h := newHarness(t, lameduck.Config{ProbeAddr: "127.0.0.1:0", ProbeListenerHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("metrics at " + r.URL.Path))
	})})
	h.start(t)
	l, _ := findListening(h.logs.String())
	c := client(t)
	get(t, c, "http://"+l+"/readyz").status(t, 200, "ok")
	if p := get(t, c, "http://"+l+"/metrics"); p.code != 200 || p.body != "metrics at /metrics" {
		t.Fatalf("GET /metrics = %d %q", p.code, p.body)
	}
	h.lc.BeginShutdown("test")
	h.waitOK(t)
}

// findListening returns the address of the first "lameduck: listening" line.
func findListening(logs string) (string, bool) {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="lameduck: listening"`) {
			continue
		}
		_, rest, ok := strings.Cut(line, " addr=")
		if !ok {
			continue
		}
		addr, _, _ := strings.Cut(rest, " ")
		return addr, true
	}
	return "", false
}
