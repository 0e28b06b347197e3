package lameduck_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// trackedHandler returns the handler a registered server really runs: the
// application's handler wrapped by the Lifecycle.
func trackedHandler(tb testing.TB, app http.Handler) (*lameduck.Lifecycle, http.Handler) {
	tb.Helper()
	lc, err := lameduck.New(lameduck.Config{LookupEnv: env(nil), IgnoreSignals: true})
	if err != nil {
		tb.Fatal(err)
	}
	return lc, lameduck.Wrap(lc, app)
}

type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header         { return w.h }
func (w nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w nopWriter) WriteHeader(int)             {}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

func TestTrackingAllocatesNothing(t *testing.T) {
	_, h := trackedHandler(t, okHandler)
	req := httptest.NewRequest("GET", "/api/orders", nil)
	w := nopWriter{http.Header{}}
	if n := exactAllocs(t, 1000, func() { h.ServeHTTP(w, req) }); n != 0 {
		t.Fatalf("tracking allocated %d times in 1000 requests, want 0", n)
	}
}

func TestInFlightListsRunningRequests(t *testing.T) {
	entered := make(chan struct{}, 3)
	release := make(chan struct{})
	lc, h := trackedHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	var wg sync.WaitGroup
	for _, p := range []string{"/a", "/b", "/c"} {
		wg.Go(func() { h.ServeHTTP(nopWriter{http.Header{}}, httptest.NewRequest("POST", p, nil)) })
	}
	for range 3 {
		recv(t, entered, "a request to enter its handler")
	}
	// Probes are not application requests.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))
	got := lc.InFlight()
	if len(got) != 3 {
		t.Fatalf("InFlight = %+v, want 3 requests", got)
	}
	seen := map[string]bool{}
	for _, r := range got {
		if r.Method != "POST" {
			t.Errorf("method %q", r.Method)
		}
		seen[r.Path] = true
	}
	if !seen["/a"] || !seen["/b"] || !seen["/c"] {
		t.Fatalf("paths %v", seen)
	}
	close(release)
	wg.Wait()
	if got := lc.InFlight(); len(got) != 0 {
		t.Fatalf("after the requests ended InFlight = %+v", got)
	}
}

func TestInFlightSurvivesAPanickingHandler(t *testing.T) {
	lc, h := trackedHandler(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() { _ = recover() }()
		h.ServeHTTP(nopWriter{http.Header{}}, httptest.NewRequest("GET", "/x", nil))
	}()
	if got := lc.InFlight(); len(got) != 0 {
		t.Fatalf("a panicking request stayed in flight: %+v", got)
	}
}

// BenchmarkHandler compares the application's handler alone with the same
// handler behind lameduck's request tracking (run with -benchmem; compare
// with benchstat). cpu-ns/op is the CPU time the process spent per request
// on every thread: on a machine shared with other work, wall time per op
// also counts the time spent waiting for a CPU.
func BenchmarkHandler(b *testing.B) {
	req := httptest.NewRequest("GET", "/api/orders", nil)
	run := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		cpu := testsupport.StartCPU()
		b.RunParallel(func(pb *testing.PB) {
			w := nopWriter{http.Header{}}
			for pb.Next() {
				h.ServeHTTP(w, req)
			}
		})
		cpu.Report(b, b.N)
	}
	b.Run("bare", func(b *testing.B) { run(b, okHandler) })
	b.Run("tracked", func(b *testing.B) {
		_, h := trackedHandler(b, okHandler)
		run(b, h)
	})
}

// Readers (InFlight) run while requests begin and end on every processor:
// each entry they list is one whole request, never the method of one and
// the path of another, and never more requests than can be in flight.
// Under -race this also holds the record's hold protocol to the memory
// model.
func TestInFlightConsistentWhileRequestsChurn(t *testing.T) {
	const workers, each = 4, 2000
	lc, h := trackedHandler(t, okHandler)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			method, path := fmt.Sprintf("M%d", w), fmt.Sprintf("/w%d", w)
			req := httptest.NewRequest(method, path, nil)
			for range each {
				h.ServeHTTP(nopWriter{http.Header{}}, req)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	reads := 0
	for giveUp := time.Now().Add(30 * time.Second); ; { // a hang guard: the requests take milliseconds
		if time.Now().After(giveUp) {
			t.Fatalf("%d requests by %d workers not done after 30s: a request never ends", workers*each, workers)
		}
		got := lc.InFlight()
		reads++
		if len(got) > workers {
			t.Fatalf("InFlight listed %d requests; at most %d can be in flight", len(got), workers)
		}
		for _, r := range got {
			if r.Path != "/w"+strings.TrimPrefix(r.Method, "M") || r.Age < 0 {
				t.Fatalf("InFlight listed a torn request: %+v", r)
			}
		}
		select {
		case <-done:
			if got := lc.InFlight(); len(got) != 0 {
				t.Fatalf("after every request ended InFlight = %+v", got)
			}
			t.Logf("%d reads during %d requests", reads, workers*each)
			return
		default:
		}
	}
}
