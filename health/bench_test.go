package health_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// One captive goroutine per wedged dependency, never a growing pile of
// them (one per probe would be a slow leak ending in an OOM kill). 10,000 probes of a wedged check grow the goroutine
// count by at most one; so do 10,000 more from 100 concurrent probers. Real
// time; asserts counts, not durations.
func TestWedgedCheck10000ProbesAtMostOneGoroutine(t *testing.T) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	release, exited := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	mustAdd(t, c, health.Check{Name: "mongo", Critical: true, Timeout: 5 * time.Millisecond, Func: func(context.Context) error {
		if calls.Add(1) == 1 {
			defer close(exited)
		}
		<-release
		return nil
	}})
	defer func() { close(release); <-exited }()

	before := runtime.NumGoroutine()
	for range 10_000 {
		mustRun(t, c, context.Background())
	}
	if growth, pings := settledGrowth(before, 1), pingGoroutines(); growth > 1 || pings != 1 {
		t.Fatalf("10,000 sequential probes of a wedged check: goroutines +%d, %d pings running; want at most +1 and 1", growth, pings)
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range 100 {
				mustRun(t, c, context.Background())
			}
		})
	}
	wg.Wait()
	if growth, pings := settledGrowth(before, 1), pingGoroutines(); growth > 1 || pings != 1 {
		t.Fatalf("10,000 concurrent probes of a wedged check: goroutines +%d, %d pings running; want at most +1 and 1", growth, pings)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the wedged check was launched %d times, want 1", n)
	}
}

// settledGrowth returns how many more goroutines run now than before. While
// that exceeds want it yields (never sleeps), for up to 20s, so that
// goroutines that have finished their work but not yet exited (a
// WaitGroup's workers just after Wait, a timer's callback) are not counted,
// even on a machine that keeps them off the CPU for seconds (a passing run
// returns at once).
func settledGrowth(before, want int) int {
	growth := runtime.NumGoroutine() - before
	for deadline := time.Now().Add(20 * time.Second); growth > want && time.Now().Before(deadline); {
		runtime.Gosched()
		growth = runtime.NumGoroutine() - before
	}
	return growth
}

// pingGoroutines counts the goroutines running a check's ping.
func pingGoroutines() int {
	return strings.Count(testsupport.AllStacks(), "health.(*checkState).ping(")
}

// Overlapping probes share pings, under real scheduling and -race. The
// exact count (one ping for 100 simultaneous probes) is held in a synctest
// bubble by TestHundredSimultaneousProbesShareExactlyOnePing; here the
// probes' goroutines start when the machine lets them, so the bound is
// one that only a failure to share can break: 100 probes of a 200ms check
// released together would need their starts spread over ten seconds to
// run it 50 times.
func TestHundredConcurrentProbesSharePings(t *testing.T) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet(), DefaultTimeout: 10 * time.Second})
	var calls atomic.Int32
	mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: counted(&calls, 200*time.Millisecond)})
	start := make(chan struct{})
	var wg sync.WaitGroup
	var notOK atomic.Int32
	for range 100 {
		wg.Go(func() {
			<-start
			if rep := mustRun(t, c, context.Background()); rep.Checks["db"] != "ok" {
				notOK.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := calls.Load(); n >= 50 {
		t.Fatalf("100 concurrent probes ran the check %d times; want them to share pings", n)
	}
	if notOK.Load() != 0 {
		t.Fatalf("%d probes did not read ok", notOK.Load())
	}
}

// The same in a synctest bubble, where the 100 probes arrive at the same
// instant: exactly one ping.
func TestHundredSimultaneousProbesShareExactlyOnePing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", Func: counted(&calls, 50*time.Millisecond)})
		start := time.Now()
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() { mustRun(t, c, t.Context()) })
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("calls %d, want 1", n)
		}
		if got := time.Since(start); got != 50*time.Millisecond {
			t.Fatalf("100 probes took %v, want 50ms", got)
		}
	})
}

// Five checks of 100ms each: the probe answers in about 100ms, not 500ms.
func BenchmarkProbeFiveChecks100ms(b *testing.B) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	for i := range 5 {
		mustAdd(b, c, health.Check{Name: fmt.Sprintf("dep%d", i), Func: sleepy(100*time.Millisecond, nil)})
	}
	ctx := context.Background()
	for b.Loop() {
		if rep, _ := c.Run(ctx, "", nil); rep.Status != health.StatusOK {
			b.Fatal(rep)
		}
	}
}

// A wedged check: every op is one probe; goroutines/op-total is the growth
// of the goroutine count over the whole run (at most 1 whatever b.N).
func BenchmarkProbeWedgedCheck(b *testing.B) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	release := make(chan struct{})
	exited := make(chan struct{})
	var calls atomic.Int32
	mustAdd(b, c, health.Check{Name: "mongo", Timeout: time.Millisecond, Func: func(context.Context) error {
		if calls.Add(1) == 1 {
			defer close(exited)
		}
		<-release
		return nil
	}})
	ctx := context.Background()
	before := runtime.NumGoroutine()
	for b.Loop() {
		c.Run(ctx, "", nil)
	}
	b.ReportMetric(float64(settledGrowth(before, 1)), "goroutines-grown")
	close(release)
	<-exited
}

// 100 concurrent probes of one 50ms check per op; check-runs/op counts how
// many times the check ran for those 100 probes.
func BenchmarkProbe100Concurrent50msCheck(b *testing.B) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	var calls atomic.Int32
	mustAdd(b, c, health.Check{Name: "db", Func: counted(&calls, 50*time.Millisecond)})
	ctx := context.Background()
	n := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() { c.Run(ctx, "", nil) })
		}
		wg.Wait()
		n++
	}
	b.ReportMetric(float64(calls.Load())/float64(n), "check-runs/op")
}

func threeTrivial(b *testing.B) *health.Checker {
	return threeTrivialWith(b, health.CheckerOptions{Logger: quiet()})
}

func threeTrivialWith(b *testing.B, opts health.CheckerOptions) *health.Checker {
	c := health.NewChecker(opts)
	for _, name := range []string{"db", "cache", "queue"} {
		mustAdd(b, c, health.Check{Name: name, Func: func(context.Context) error { return nil }})
	}
	return c
}

// A healthy probe with three trivial checks: the engine alone.
func BenchmarkProbeHealthyThreeChecks(b *testing.B) {
	c := threeTrivial(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if rep, _ := c.Run(ctx, "", nil); rep.Status != health.StatusOK {
			b.Fatal(rep)
		}
	}
}

// The same through ServeReadiness, JSON body included.
func BenchmarkServeReadinessHealthyThreeChecks(b *testing.B) {
	benchServeReadiness(b, threeTrivial(b))
}

// benchServeReadiness measures healthy probes of c through ServeReadiness.
func benchServeReadiness(b *testing.B, c *health.Checker) {
	info := &health.Info{Version: "v1", Commit: "c"}
	r := httptest.NewRequest("GET", "/readyz", nil)
	extra := map[string]any{"phase": "serving"}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		c.ServeReadiness(rec, r, info, "", extra)
		if rec.Code != 200 {
			b.Fatal(rec.Body)
		}
	}
}
