package lameduck_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

func probeOf(t *testing.T, lc *lameduck.Lifecycle, path string, header ...string) probe {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, req)
	return probe{rec.Code, rec.Body.String()}
}

func TestReadinessRunsChecksOnlyWhileServing(t *testing.T) {
	var pings atomic.Int32
	var dbDown atomic.Bool
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
		pings.Add(1)
		if dbDown.Load() {
			return errors.New("dial tcp 10.0.0.7:5432: connection refused")
		}
		return nil
	}})
	h.lc.AddCheck(health.Check{Name: "cache", Func: func(context.Context) error {
		pings.Add(1)
		return errors.New("redis://:hunter2@cache:6379 unreachable")
	}})
	release := make(chan struct{})
	h.lc.AddStartupTask("warm-up", func(context.Context) error { <-release; return nil })
	h.serve(http.NotFoundHandler())
	h.run()

	probeOf(t, h.lc, "/readyz").status(t, 503, "starting")
	if n := pings.Load(); n != 0 {
		t.Fatalf("checks ran %d times while starting", n)
	}
	close(release)
	await(t, h.lc.Events().StartupDone)

	p := probeOf(t, h.lc, "/readyz")
	p.status(t, 200, "degraded")
	if !strings.Contains(p.body, `"db":"ok"`) || strings.Contains(p.body, "hunter2") {
		t.Fatalf("body %s: want db ok and the cache's password redacted", p.body)
	}
	dbDown.Store(true)
	probeOf(t, h.lc, "/readyz").status(t, 503, "failed")
	probeOf(t, h.lc, "/readyz/cache").status(t, 200, "degraded")
	if p := probeOf(t, h.lc, "/readyz?verbose"); !strings.Contains(p.body, "[-]db") {
		t.Fatalf("verbose report %q", p.body)
	}
	probeOf(t, h.lc, "/readyz?exclude=db").status(t, 200, "degraded")
	if p := probeOf(t, h.lc, "/readyz/nope"); p.code != 404 || !strings.Contains(p.body, "cache") {
		t.Fatalf("unknown check: %d %s", p.code, p.body)
	}
	if p := probeOf(t, h.lc, "/readyz", "Accept", "application/health+json"); !strings.Contains(p.body, `"status":"fail"`) {
		t.Fatalf("health+json: %s", p.body)
	}
	probeOf(t, h.lc, "/healthz").status(t, 200, "ok")

	before := pings.Load()
	h.lc.BeginShutdown("test")
	for _, path := range []string{"/readyz", "/readyz/db", "/readyz?exclude=cache"} {
		probeOf(t, h.lc, path).status(t, 503, "draining")
	}
	if p := probeOf(t, h.lc, "/readyz?verbose"); p.code != 503 || !strings.Contains(p.body, "draining") {
		t.Fatalf("verbose while draining: %d %q", p.code, p.body)
	}
	if n := pings.Load(); n != before {
		t.Fatalf("checks ran %d more times while draining; readiness must not consult them", n-before)
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

// Liveness runs no dependency check in any phase: starting, serving (where
// readiness does run it) and draining.
func TestLivenessNeverRunsChecks(t *testing.T) {
	var pings atomic.Int32
	cfg := lameduck.Config{ShutdownDelay: time.Second}
	h := newHarness(t, cfg)
	if err := h.lc.AddCheck(health.Check{Name: "db", Critical: true, Func: func(context.Context) error {
		pings.Add(1)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	probeOf(t, h.lc, "/healthz").status(t, 200, "ok") // starting
	if n := pings.Load(); n != 0 {
		t.Fatalf("/healthz while starting ran the check %d time(s)", n)
	}
	h.serve(http.NotFoundHandler())
	h.start(t)
	for range 3 {
		probeOf(t, h.lc, "/healthz").status(t, 200, "ok")
	}
	if n := pings.Load(); n != 0 {
		t.Fatalf("/healthz while serving ran the check %d time(s)", n)
	}
	probeOf(t, h.lc, "/readyz").status(t, 200, "ok")
	if n := pings.Load(); n != 1 {
		t.Fatalf("/readyz ran the check %d time(s); want 1 (the harness must reach serving)", n)
	}
	h.endWindow(time.Second)
	probeOf(t, h.lc, "/healthz").status(t, 200, "ok")
	h.waitOK(t)
	if n := pings.Load(); n != 1 {
		t.Fatalf("the check ran %d time(s) in all; want only readiness's 1", n)
	}
}

func TestCheckPanicReachesOnPanic(t *testing.T) {
	got := make(chan string, 1)
	h2 := started(t, lameduck.Config{ShutdownDelay: time.Second, CheckDetails: lameduck.CheckDetailsShow,
		OnPanic: func(what string, v any, _ []byte) { got <- what }})
	h2.lc.AddCheck(health.Check{Name: "s3", Func: func(context.Context) error { panic("malformed response") }})
	p := probeOf(t, h2.lc, "/readyz")
	p.status(t, 200, "degraded")
	if !strings.Contains(p.body, `"s3":"panic: malformed response"`) {
		t.Fatalf("body %s", p.body)
	}
	if w := recv(t, got, "OnPanic"); w != "check s3" {
		t.Fatalf("OnPanic got %q", w)
	}
	h2.endWindow(time.Second)
	h2.waitOK(t)
}

// A check with Refresh is pinged on its own schedule from the moment the
// pod serves, by a background loop that the shutdown signal stops and the
// join waits for: no ping after the sequence has begun (a draining pod
// consults nothing), and goleak (TestMain) finds nothing left. Real time for
// the check's own schedule (MaxAge 20ms); it asserts counts and order, with
// seconds of slack, never a duration.
func TestRefreshLoopRunsWhileServingAndIsJoined(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	var pings atomic.Int32
	if err := h.lc.AddCheck(health.Check{Name: "db", MaxAge: 20 * time.Millisecond, Refresh: true,
		Func: func(context.Context) error { pings.Add(1); return nil }}); err != nil {
		t.Fatal(err)
	}
	h.serve(http.NotFoundHandler())
	h.start(t)
	refreshedThenJoined(t, h, &pings, "a check with MaxAge 20ms")
}

// refreshedThenJoined waits, with seconds of slack, until pings has counted
// three refreshes of the check named by what, ends h's window, waits for
// Run, and checks that no refresh follows. Sound either way the host
// schedules: the join waited for the loop before Run returned, so a correct
// loop can never ping after this point, and the check cannot fail falsely.
// A loop left running pings every 20ms, so 100ms gives it five chances to be
// seen here (a host that starves it for all five hides it from this check,
// not from goleak, which TestMain runs on the whole package).
func refreshedThenJoined(t *testing.T, h *harness, pings *atomic.Int32, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); pings.Load() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d refreshes in 5s of %s, and no probe", pings.Load(), what)
		}
	}
	h.endWindow(time.Second)
	h.waitOK(t)
	n := pings.Load()
	time.Sleep(100 * time.Millisecond)
	if got := pings.Load(); got != n {
		t.Fatalf("%d refreshes after Run returned", got-n)
	}
}

// A check with Refresh added once the pod serves is refreshed too, whether
// the refresh already runs for another check (one pinged about hourly,
// whose wait must not hold the new one back) or not at all yet; and, like
// the others, not after Run returned. Before, the refresh started only
// when the pod began to serve, and looked at new checks only when it woke
// for an old one.
func TestRefreshCheckAddedWhileServingIsRefreshed(t *testing.T) {
	for _, other := range []bool{false, true} {
		t.Run(fmt.Sprintf("another Refresh check=%v", other), func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
			if other {
				if err := h.lc.AddCheck(health.Check{Name: "hourly", MaxAge: time.Hour, Refresh: true,
					Func: func(context.Context) error { return nil }}); err != nil {
					t.Fatal(err)
				}
			}
			h.serve(http.NotFoundHandler())
			h.start(t)
			var pings atomic.Int32
			if err := h.lc.AddCheck(health.Check{Name: "db", MaxAge: 20 * time.Millisecond, Refresh: true,
				Func: func(context.Context) error { pings.Add(1); return nil }}); err != nil {
				t.Fatal(err)
			}
			refreshedThenJoined(t, h, &pings, "a check with MaxAge 20ms added while serving")
		})
	}
}
