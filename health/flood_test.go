package health_test

import (
	"context"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
)

// 10,000 concurrent readiness probes, as a flood from the internet would
// send, cost one ping per check (single-flight), whatever the number of
// probes, and a bounded amount of heap per waiting probe, all of it
// returned once they have their answer.
func TestTenThousandConcurrentProbesOnePing(t *testing.T) {
	const probes = 10000
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet(), DefaultTimeout: time.Minute})
		var dbPings, cachePings atomic.Int32
		var release chan struct{}
		ping := func(n *atomic.Int32) func(context.Context) error {
			return func(ctx context.Context) error {
				rel := release
				n.Add(1)
				<-rel
				return nil
			}
		}
		mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: ping(&dbPings)})
		mustAdd(t, c, health.Check{Name: "cache", Func: ping(&cachePings)})
		info := &health.Info{Version: "v1", Commit: "c", HideDetails: true}
		codes := make([]int, probes)

		// flood sends the probes, waits until every one of them is blocked
		// on the shared pings, measures the heap, then releases the pings
		// and waits for every answer.
		flood := func() (during runtime.MemStats) {
			release = make(chan struct{})
			var wg sync.WaitGroup
			for i := range probes {
				wg.Go(func() {
					rec := httptest.NewRecorder()
					c.ServeReadiness(rec, httptest.NewRequest("GET", "/readyz", nil), info, "", nil)
					codes[i] = rec.Code
				})
			}
			synctest.Wait()
			runtime.GC()
			runtime.ReadMemStats(&during)
			close(release)
			wg.Wait()
			return during
		}
		// The first flood warms the runtime (it keeps goroutine
		// descriptors for reuse); the second is measured.
		flood()
		dbPings.Store(0)
		cachePings.Store(0)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		during := flood()
		runtime.GC()
		runtime.ReadMemStats(&after)

		if d, cc := dbPings.Load(), cachePings.Load(); d != 1 || cc != 1 {
			t.Fatalf("%d concurrent probes pinged db %d times and cache %d times; want once each", probes, d, cc)
		}
		for i, code := range codes {
			if code != 200 {
				t.Fatalf("probe %d answered %d", i, code)
			}
		}
		perProbe := (int64(during.HeapAlloc) - int64(before.HeapAlloc)) / probes
		t.Logf("%d concurrent probes: one ping per check; heap while they wait %d B per probe (request and recorder included)",
			probes, perProbe)
		// A request and a recorder are most of it; the engine's share per
		// waiting probe is a few hundred bytes. 16 kB would mean something
		// per probe that should not be (a copied report, a buffered body).
		if perProbe > 16<<10 {
			t.Fatalf("heap grew %d B per waiting probe; want it bounded", perProbe)
		}
		if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 1<<20 {
			t.Fatalf("heap still %d kB above the start once every probe answered", grown>>10)
		}
	})
}
