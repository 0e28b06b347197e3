package bench_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	alex "github.com/alexliesenfeld/health"
	hellofresh "github.com/hellofresh/health-go/v5"
	"github.com/lameduck/lameduck/health"
	"go.uber.org/goleak"
)

// hellofresh/health-go sends a late check's result on an unbuffered channel
// nobody reads any more: every probe of a wedged check strands that
// goroutine for good, even after the check returns. That is the leak being
// measured here, so goleak is told to expect it; everything else must end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hellofresh/health-go/v5.(*Health).Measure.func1.2"))
}

var names = []string{"db", "cache", "queue"}

func trivial(context.Context) error { return nil }

// peer is one library set up to probe checks: probe runs the checks once
// and says whether the result is healthy; handler serves the same probe
// over HTTP.
type peer struct {
	name  string
	build func(tb testing.TB, timeout time.Duration, fns ...func(context.Context) error) (probe func(context.Context) bool, handler http.Handler)
}

var peers = []peer{
	{"lameduck", func(tb testing.TB, timeout time.Duration, fns ...func(context.Context) error) (func(context.Context) bool, http.Handler) {
		c := health.NewChecker(health.CheckerOptions{DefaultTimeout: timeout, Logger: slog.New(slog.DiscardHandler)})
		for i, fn := range fns {
			if err := c.AddCheck(health.Check{Name: names[i], Func: fn, Critical: true}); err != nil {
				tb.Fatal(err)
			}
		}
		info := &health.Info{Version: "v1", Commit: "c"}
		probe := func(ctx context.Context) bool {
			rep, err := c.Run(ctx, "", nil)
			return err == nil && rep.Status == health.StatusOK
		}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.ServeReadiness(w, r, info, "", nil) })
		return probe, h
	}},
	{"alexliesenfeld", func(tb testing.TB, timeout time.Duration, fns ...func(context.Context) error) (func(context.Context) bool, http.Handler) {
		// No cache (it would skip the work being measured) and no autostart
		// (it would run an extra probe in the background).
		opts := []alex.CheckerOption{alex.WithDisabledCache(), alex.WithDisabledAutostart(), alex.WithTimeout(10 * time.Second)}
		for i, fn := range fns {
			opts = append(opts, alex.WithCheck(alex.Check{Name: names[i], Check: fn, Timeout: timeout}))
		}
		c := alex.NewChecker(opts...)
		probe := func(ctx context.Context) bool { return c.Check(ctx).Status == alex.StatusUp }
		return probe, alex.NewHandler(c)
	}},
	{"hellofresh", func(tb testing.TB, timeout time.Duration, fns ...func(context.Context) error) (func(context.Context) bool, http.Handler) {
		var cfgs []hellofresh.Config
		for i, fn := range fns {
			cfgs = append(cfgs, hellofresh.Config{Name: names[i], Timeout: timeout, Check: fn})
		}
		h, err := hellofresh.New(hellofresh.WithChecks(cfgs...))
		if err != nil {
			tb.Fatal(err)
		}
		probe := func(ctx context.Context) bool { return h.Measure(ctx).Status == hellofresh.StatusOK }
		return probe, h.Handler()
	}},
}

// A healthy probe of three trivial checks, the engine alone.
func BenchmarkHealthyProbe(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			probe, _ := p.build(b, time.Second, trivial, trivial, trivial)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if !probe(ctx) {
					b.Fatal("unhealthy")
				}
			}
		})
	}
}

// The same probe through each library's HTTP handler, body included.
func BenchmarkHealthyProbeHTTP(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			_, h := p.build(b, time.Second, trivial, trivial, trivial)
			r := httptest.NewRequest("GET", "/readyz", nil)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// wedged returns a check that ignores its context until release is closed.
func wedged(release <-chan struct{}) func(context.Context) error {
	return func(context.Context) error { <-release; return nil }
}

// settledGrowth is the goroutine count's growth since before, after
// yielding (never sleeping) for up to limit while it exceeds want, so that
// goroutines on their way out are not counted.
func settledGrowth(before, want int, limit time.Duration) int {
	growth := runtime.NumGoroutine() - before
	for deadline := time.Now().Add(limit); growth > want && time.Now().Before(deadline); {
		runtime.Gosched()
		growth = runtime.NumGoroutine() - before
	}
	return growth
}

// Probes of one wedged check (1ms deadline): leaked-goroutines/op is the
// growth of the goroutine count while the check is wedged, divided by the
// number of probes.
func BenchmarkWedgedProbe(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			release := make(chan struct{})
			probe, _ := p.build(b, time.Millisecond, wedged(release))
			ctx := context.Background()
			before := runtime.NumGoroutine()
			n := 0
			for b.Loop() {
				probe(ctx)
				n++
			}
			b.ReportMetric(float64(settledGrowth(before, 1, time.Second))/float64(n), "leaked-goroutines/op")
			close(release)
			settledGrowth(before, 0, time.Second) // let what can end, end, before the next library
		})
	}
}

// 1,000 probes of one wedged check, per library: lameduck must grow the
// goroutine count by at most 1 while the check is wedged, and by 0 once it
// returns; the peers' numbers are reported, not judged.
func TestWedgedCheckGoroutineGrowth(t *testing.T) {
	const probes = 1000
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			release := make(chan struct{})
			probe, _ := p.build(t, time.Millisecond, wedged(release))
			ctx := context.Background()
			before := runtime.NumGoroutine()
			start := time.Now()
			for range probes {
				if probe(ctx) {
					t.Fatal("a wedged check reported healthy")
				}
			}
			took := time.Since(start)
			wedgedGrowth := settledGrowth(before, 1, time.Second)
			close(release)
			afterGrowth := settledGrowth(before, 0, time.Second)
			t.Logf("%-15s %d probes of a wedged check in %v: goroutines %+d while wedged, %+d after it returned",
				p.name, probes, took.Round(time.Millisecond), wedgedGrowth, afterGrowth)
			if p.name == "lameduck" && (wedgedGrowth > 1 || afterGrowth > 0) {
				t.Fatalf("lameduck: goroutines %+d while wedged (want at most +1), %+d after (want 0)", wedgedGrowth, afterGrowth)
			}
		})
	}
}
