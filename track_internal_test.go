package lameduck

import (
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

// The registry of records lists each record once, by a weak pointer: the
// records the pool lets go at a collection leave it, so a server that runs
// for months with collections between its requests keeps it small. Without
// the pruning every round below would add a record for good.
func TestTrackerRegistryForgetsCollectedRecords(t *testing.T) {
	tr := newTracker(systemClock{})
	req := httptest.NewRequest("GET", "/x", nil)
	for range 300 {
		tr.end(tr.begin("GET", "/x", req))
		runtime.GC() // twice: the pool keeps a victim for one cycle
		runtime.GC()
	}
	tr.regMu.Lock()
	n := len(tr.reg)
	tr.regMu.Unlock()
	if n >= 128 {
		t.Fatalf("registry holds %d records after 300 collections with one request in flight at a time; want < 128", n)
	}
	if got := tr.inflight(); got != 0 {
		t.Fatalf("inflight = %d after every request ended", got)
	}
}

// A reader holding a record (copying its fields) makes end wait: the
// record's fields stay whole until the hold is released, and end then frees
// it. Under -race a free that did not wait is reported as a race on the
// fields.
func TestTrackerEndWaitsForAReader(t *testing.T) {
	tr := newTracker(systemClock{})
	rec := tr.begin("POST", "/orders", nil)
	if !rec.hold() {
		t.Fatal("hold of a record in flight failed")
	}
	ended := make(chan struct{})
	go func() {
		tr.end(rec)
		close(ended)
	}()
	for range 100 {
		runtime.Gosched() // let end run into the hold
	}
	if rec.method != "POST" || rec.path != "/orders" {
		t.Fatalf("fields changed under a hold: %q %q", rec.method, rec.path)
	}
	rec.release()
	select { // a hang guard: end waiting forever on a released hold is the bug this test would catch
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("end still waits 10s after the reader released its hold")
	}
	if rec.hold() {
		t.Fatal("an ended record can still be held")
	}
	if got := tr.inflight(); got != 0 {
		t.Fatalf("inflight = %d after end", got)
	}
}
