package lameduck_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
)

// OnTransition hears the events in order, each check verdict and each
// probe answer, each naming the Lifecycle it happened to.
func TestOnTransition(t *testing.T) {
	var mu sync.Mutex
	var events, checks, probes []string
	var from []*lameduck.Lifecycle
	lc, clk := testsupport.NewLifecycle(t, lameduck.Config{ShutdownDelay: time.Second, OnTransition: func(tr lameduck.Transition) {
		mu.Lock()
		defer mu.Unlock()
		from = append(from, tr.Lifecycle)
		switch tr.Kind {
		case lameduck.TransitionEvent:
			events = append(events, tr.Event.Name()+">"+tr.Phase.String())
		case lameduck.TransitionCheck:
			checks = append(checks, tr.Check.Name+"="+string(tr.Check.Outcome))
		case lameduck.TransitionProbe:
			probes = append(probes, tr.Path+" "+http.StatusText(tr.Code))
		}
	}})
	if err := lc.AddCheck(health.Check{Name: "db", Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	wait := lameducktest.Start(t, lc)
	for _, p := range []string{"/readyz", "/healthz", "/nope"} {
		lc.ProbeHandler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	lameducktest.EndWindow(t, lc, clk)
	lc.ProbeHandler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/readyz", nil))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// The ping reports after the probe has its answer: wait for it by
	// count.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(checks)
		mu.Unlock()
		if n > 0 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The hooks and the HTTP drain run side by side: either may end first.
	if len(events) > 4 {
		slices.Sort(events[3:5])
	}
	wantEvents := []string{"startup-done>serving", "shutdown-initiated>draining", "window-ended>stopping",
		"hooks-done>stopping", "http-drained>stopping", "joined>stopping", "stopped>stopped"}
	if !slices.Equal(events, wantEvents) {
		t.Errorf("events %v, want %v", events, wantEvents)
	}
	wantProbes := []string{"/readyz OK", "/healthz OK", "/nope Not Found", "/readyz Service Unavailable"}
	if !slices.Equal(probes, wantProbes) {
		t.Errorf("probes %v, want %v", probes, wantProbes)
	}
	if !slices.Equal(checks, []string{"db=ok"}) {
		t.Errorf("checks %v, want [db=ok]", checks)
	}
	for i, got := range from {
		if got != lc {
			t.Errorf("transition %d names Lifecycle %p, want the one it happened to, %p", i, got, lc)
		}
	}
}

// nullWriter is a ResponseWriter that keeps nothing, so a benchmark counts
// the probe handler's own work.
type nullWriter struct{ h http.Header }

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(int)             {}

// A liveness probe with and without Config.OnTransition: unset, the probe
// handler is not wrapped; set, the wrapper and the Transition cost little.
func BenchmarkLivenessProbeOnTransition(b *testing.B) {
	for _, hooked := range []bool{false, true} {
		name := "unset"
		if hooked {
			name = "set"
		}
		b.Run(name, func(b *testing.B) {
			cfg := lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false },
				Logger: slog.New(slog.DiscardHandler)}
			if hooked {
				cfg.OnTransition = func(lameduck.Transition) {}
			}
			lc, err := lameduck.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			h := lc.ProbeHandler()
			req := httptest.NewRequest("GET", "/healthz", nil)
			w := &nullWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	}
}
