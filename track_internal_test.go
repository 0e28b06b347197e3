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
	rec, gen := tr.begin("POST", "/orders", nil)
	held, ok := rec.hold()
	if !ok {
		t.Fatal("hold of a record in flight failed")
	}
	ended := make(chan struct{})
	go func() {
		tr.end(rec, gen)
		close(ended)
	}()
	for range 100 {
		runtime.Gosched() // let end run into the hold
	}
	if rec.method != "POST" || rec.path != "/orders" {
		t.Fatalf("fields changed under a hold: %q %q", rec.method, rec.path)
	}
	rec.release(held)
	select { // a hang guard: end waiting forever on a released hold is the bug this test would catch
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("end still waits 10s after the reader released its hold")
	}
	if _, ok := rec.hold(); ok {
		t.Fatal("an ended record can still be held")
	}
	if got := tr.inflight(); got != 0 {
		t.Fatalf("inflight = %d after end", got)
	}
}

// Misusing a Tracked is harmless (Tracked's doc): a second End returns at
// once and changes nothing; a stale End, after the pool handed the record
// to another request, leaves that request in flight and its own End works;
// Hijacked after End reports false and brings nothing back in flight.
// Before records carried a generation, the second End spun forever, the
// stale one untracked the other request, and Hijacked after End left a
// phantom request in flight for good.
func TestTrackedMisuseIsHarmless(t *testing.T) {
	lc, err := New(Config{IgnoreSignals: true, LookupEnv: func(string) (string, bool) { return "", false },
		Environ: func() []string { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	// A hang guard: the bug this test catches is an End that never returns.
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s has not returned after 10s", what)
		}
	}

	a, _ := lc.TrackRequest("GET", "/a", false)
	a.End()
	within("a second End", a.End)
	if got := lc.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight after End twice = %v", got)
	}

	// The pool hands an ended request's record to the next one (on the same
	// P, unless the race detector's pool dropped it: try again then).
	var b Tracked
	for try := 0; ; try++ {
		a, _ = lc.TrackRequest("GET", "/a", false)
		a.End()
		b, _ = lc.TrackRequest("POST", "/b-payment", false)
		if b.rec == a.rec {
			break
		}
		b.End()
		if try == 1000 {
			t.Fatal("the pool never handed a record to the next request")
		}
	}
	within("a stale End", a.End)
	if got := lc.InFlight(); len(got) != 1 || got[0].Path != "/b-payment" {
		t.Fatalf("InFlight after a stale End = %v; want /b-payment still in flight", got)
	}
	if a.Hijacked(nil) {
		t.Fatal("Hijacked on a stale Tracked reported true")
	}
	if got := lc.InFlight(); len(got) != 1 || got[0].Hijacked || got[0].Path != "/b-payment" {
		t.Fatalf("InFlight after a stale Hijacked = %v; want /b-payment, not hijacked", got)
	}
	within("the live request's End", b.End)
	if got := lc.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight after the live request's End = %v", got)
	}

	h, _ := lc.TrackRequest("GET", "/ws", false)
	h.End()
	if h.Hijacked(nil) {
		t.Fatal("Hijacked after End reported true")
	}
	if got := lc.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight after End then Hijacked = %v; want none", got)
	}
}
