package bench_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	alex "github.com/alexliesenfeld/health"
	etherlabs "github.com/etherlabsio/healthcheck/v2"
	hellofresh "github.com/hellofresh/health-go/v5"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/goleak"
	"k8s.io/apiserver/pkg/server/healthz"
)

// hellofresh/health-go and etherlabsio/healthcheck send a late check's
// result on an unbuffered channel nobody reads any more: every probe of a
// wedged check strands that goroutine for good, even after the check
// returns. That is the leak being measured here, so goleak is told to expect
// it; everything else must end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/hellofresh/health-go/v5.(*Health).Measure.func1.2"),
		goleak.IgnoreTopFunction("github.com/etherlabsio/healthcheck/v2.(*timeoutChecker).Check.func1"))
}

var names = []string{"db", "cache", "queue"}

func trivial(context.Context) error { return nil }

// peer is one library set up to probe checks: probe runs the checks once
// and says whether the result is healthy (nil for a library that has no
// engine apart from its HTTP handler); handler serves the same probe over
// HTTP.
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
	{"k8s-healthz", func(tb testing.TB, _ time.Duration, fns ...func(context.Context) error) (func(context.Context) bool, http.Handler) {
		// The Kubernetes API server's own readyz, installed as the API
		// server installs it (on a mux, with its metrics). It has no
		// deadline: checks run inline, one after another, in the request's
		// goroutine.
		var checks []healthz.HealthChecker
		for i, fn := range fns {
			checks = append(checks, healthz.NamedCheck(names[i], func(r *http.Request) error { return fn(r.Context()) }))
		}
		mux := http.NewServeMux()
		healthz.InstallReadyzHandler(mux, checks...)
		return nil, mux
	}},
	{"etherlabs", func(tb testing.TB, timeout time.Duration, fns ...func(context.Context) error) (func(context.Context) bool, http.Handler) {
		// One deadline for the whole probe (WithTimeout); each check runs in
		// a goroutine of its own, inside another goroutine per check.
		opts := []etherlabs.Option{etherlabs.WithTimeout(timeout)}
		for i, fn := range fns {
			opts = append(opts, etherlabs.WithChecker(names[i], etherlabs.CheckerFunc(fn)))
		}
		return nil, etherlabs.Handler(opts...)
	}},
}

// A healthy probe of three trivial checks, the engine alone.
func BenchmarkHealthyProbe(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			probe, _ := p.build(b, time.Second, trivial, trivial, trivial)
			if probe == nil {
				b.Skip("no engine apart from the HTTP handler")
			}
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
// cpu-ns/op is the CPU time the whole process spent per probe, on every
// thread (user and system): on a machine shared with other work, wall time
// per op also counts the time spent waiting for a CPU.
func BenchmarkHealthyProbeHTTP(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			_, h := p.build(b, time.Second, trivial, trivial, trivial)
			r := httptest.NewRequest("GET", "/readyz", nil)
			b.ReportAllocs()
			cpu, n := testsupport.StartCPU(), 0
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
				n++
			}
			cpu.Report(b, n)
		})
	}
}

// What a deadline costs a probe that one goroutine sends at a time, apart
// from any library: the same few microseconds of work (about a probe's
// worth), then a trivial function run inline ("inline", as k8s-healthz runs
// its checks) or handed to a new goroutine the caller yields to ("handoff",
// as lameduck must, so that a check that blocks can be abandoned at its
// deadline). With a processor idle between probes, making a goroutine
// runnable wakes a sleeping thread for it (a futex system call); the
// difference between the two is that floor.
func BenchmarkGoroutineHandOff(b *testing.B) {
	var sink atomic.Int64
	work := func() {
		s := int64(0)
		for i := range int64(6000) {
			s += i * i
		}
		sink.Add(s)
	}
	b.Run("inline", func(b *testing.B) {
		for b.Loop() {
			work()
			sink.Add(1)
		}
	})
	b.Run("handoff", func(b *testing.B) {
		for b.Loop() {
			work()
			var done atomic.Bool
			go func() { sink.Add(1); done.Store(true) }()
			runtime.Gosched()
			for !done.Load() {
				runtime.Gosched()
			}
		}
	})
}

// wedged returns a check that ignores its context until release is closed;
// inside counts its calls that have not returned yet.
func wedged(release <-chan struct{}, inside *atomic.Int64) func(context.Context) error {
	return func(context.Context) error {
		inside.Add(1)
		defer inside.Add(-1)
		<-release
		return nil
	}
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

// probeOf returns p's probe of the checks fns: its engine's, or, for a
// library that has none, one GET /readyz through its HTTP handler, healthy
// when answered 200.
func probeOf(tb testing.TB, p peer, timeout time.Duration, fns ...func(context.Context) error) func(context.Context) bool {
	probe, h := p.build(tb, timeout, fns...)
	if probe != nil {
		return probe
	}
	return func(ctx context.Context) bool {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/readyz", nil))
		return rec.Code == http.StatusOK
	}
}

// Probes of one wedged check (1ms deadline): leaked-goroutines/op is the
// growth of the goroutine count while the check is wedged, divided by the
// number of probes. k8s-healthz is left out: its checks have no deadline,
// so its first probe never answers.
func BenchmarkWedgedProbe(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			if p.name == "k8s-healthz" {
				b.Skip("no deadline: a probe of a wedged check never answers")
			}
			release := make(chan struct{})
			probe := probeOf(b, p, time.Millisecond, wedged(release, new(atomic.Int64)))
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

// 200 probes of one wedged check (1ms deadline), per library, as a prober
// sends them: each in a goroutine of its own, the prober waiting for its
// answer up to 10ms before it sends the next (the kubelet gives up at its
// timeoutSeconds the same way). It asserts counts, never durations:
// lameduck grows the goroutine count by at most 1 while the check is wedged
// and by 0 once it returns; every peer grows it by about one per probe
// while the check is wedged (at least 90% of the probes: the claim of the
// README), whether its probes answer (a deadline per probe, a goroutine
// left behind each time) or not (k8s-healthz: no deadline, the probe itself
// is stuck). What is left after the check returns is reported.
func TestWedgedCheckGoroutineGrowth(t *testing.T) {
	const probes = 200
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			release := make(chan struct{})
			var inside atomic.Int64
			probe := probeOf(t, p, time.Millisecond, wedged(release, &inside))
			ctx := context.Background()
			before := runtime.NumGoroutine()
			healthy, answered := 0, 0
			start := time.Now()
			for range probes {
				done := make(chan bool, 1)
				go func() { done <- probe(ctx) }()
				select {
				case ok := <-done:
					answered++
					if ok {
						healthy++
					}
				case <-time.After(10 * time.Millisecond):
				}
			}
			took := time.Since(start)
			// A peer's leaked goroutines do not end while the check is
			// wedged: settle only down to their number. lameduck's must
			// leave, however long the scheduler keeps them off the CPU: a
			// generous bound (a passing run returns at once).
			want, limit := probes, 500*time.Millisecond
			if p.name == "lameduck" {
				want, limit = 1, 20*time.Second
			}
			wedgedGrowth := settledGrowth(before, want, limit)
			close(release)
			// Every released check returns (hellofresh's and etherlabs'
			// goroutines then stay blocked for good, the others end), so
			// that the next library's count does not start while this
			// one's goroutines are still on their way out of the check.
			for deadline := time.Now().Add(20 * time.Second); inside.Load() > 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			afterGrowth := settledGrowth(before, 0, limit)
			t.Logf("%-15s %d probes of a wedged check in %v, %d answered within 10ms: goroutines %+d while wedged, %+d after it returned",
				p.name, probes, took.Round(time.Millisecond), answered, wedgedGrowth, afterGrowth)
			if healthy > 0 {
				t.Errorf("%s: %d probes of a wedged check reported healthy", p.name, healthy)
			}
			switch {
			case p.name == "lameduck":
				if wedgedGrowth > 1 || afterGrowth > 0 {
					t.Fatalf("lameduck: goroutines %+d while wedged (want at most +1), %+d after (want 0)", wedgedGrowth, afterGrowth)
				}
			case wedgedGrowth < probes*9/10:
				t.Fatalf("%s: goroutines %+d while wedged over %d probes; the README says a peer leaks one per probe", p.name, wedgedGrowth, probes)
			}
		})
	}
}
