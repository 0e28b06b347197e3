package lameduck_test

// The teardown: the HTTP drain, its tail kept for the join, the requests cut
// and how they are named, the teardown hooks beside the HTTP drain.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// stuckServer registers a server whose handler blocks until the request's
// context ends, and returns a func that sends GET path and reports when it
// entered the handler.
func stuckServer(t *testing.T, h *harness) (send func(path string), results <-chan error) {
	t.Helper()
	entered := make(chan struct{})
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	}))
	h.start(t)
	c := client(t)
	res := make(chan error, 64)
	return func(path string) {
		go func() {
			resp, err := c.Get(base + path)
			if err == nil {
				resp.Body.Close()
			}
			res <- err
		}()
		recv(t, entered, "the request "+path+" to enter its handler")
	}, res
}

// "The HTTP drain stops at T minus a tail kept for steps 2 and 3 …: 500ms
// (or LAMEDUCK_JOIN_BUDGET, when set) if any background task was ever
// started, plus as much again if closers are registered; if that is more
// than T/2, each is T/4 instead. A service that uses neither gives
// in-flight requests all of T. With T = 3s and one GoWrite, the cut line
// reads after 2.5s." A readiness check with Refresh is the Lifecycle's own
// work, not background work: it keeps no tail (it used to, as a GoLoop).
func TestHTTPDrainKeepsATailForTheJoin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		teardown   time.Duration
		background bool
		closer     bool
		httpEnd    time.Duration
		refresh    bool // a readiness check with MaxAge and Refresh
	}{
		{"neither", 3 * time.Second, false, false, 3 * time.Second, false},
		{"neither, with a Refresh check", 3 * time.Second, false, false, 3 * time.Second, true},
		{"one GoWrite", 3 * time.Second, true, false, 2500 * time.Millisecond, false},
		{"a closer", 3 * time.Second, false, true, 2500 * time.Millisecond, false},
		{"GoWrite and a closer", 3 * time.Second, true, true, 2 * time.Second, false},
		{"more than half of T", 1500 * time.Millisecond, true, true, 750 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: tc.teardown})
			if tc.refresh {
				if err := h.lc.AddCheck(health.Check{Name: "db", MaxAge: time.Second, Refresh: true,
					Func: func(context.Context) error { return nil }}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.background {
				done := make(chan struct{})
				if err := h.lc.GoWrite("audit-row", 0, func(context.Context) error { close(done); return nil }); err != nil {
					t.Fatal(err)
				}
				recv(t, done, "the write to run")
			}
			if tc.closer {
				if err := h.lc.AddCloser("db", func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			send, results := stuckServer(t, h)
			send("/stuck")
			h.endWindow(time.Second)
			h.timers(1) // the HTTP drain's deadline
			// The cut line's "after" is that deadline less the teardown's
			// start, computed by the code, not measured by the test.
			h.clock.Advance(tc.httpEnd)
			if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run = %v, want the cut (exit 1)", err)
			}
			if err := recv(t, results, "the cut request"); err == nil {
				t.Fatal("the stuck request was answered; it should have been cut")
			}
			want := "HTTP drain cut 1 in-flight request(s) after " + tc.httpEnd.String() + ": GET /stuck"
			if !strings.Contains(h.logs.String(), want) {
				t.Fatalf("the log lacks %q:\n%s", want, h.logs)
			}
			if !tc.background && strings.Contains(h.logs.String(), "join done") {
				t.Fatalf("a join line for a service that started no background work:\n%s", h.logs)
			}
		})
	}
}

// "Cut requests are listed oldest first; after 20 the line ends with
// `, and N more`."
func TestCutRequestsOldestFirstAndCapped(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second})
	send, results := stuckServer(t, h)
	const n = 23
	for i := range n {
		send(fmt.Sprintf("/r%02d", i))
		h.clock.Advance(10 * time.Millisecond) // each request 10ms younger than the one before
	}
	h.endWindow(time.Second)
	h.timers(1)
	h.clock.Advance(3 * time.Second)
	if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want the cut (exit 1)", err)
	}
	for range n {
		recv(t, results, "a cut request")
	}
	var line string
	for l := range strings.Lines(h.logs.String()) {
		if strings.Contains(l, "HTTP drain cut") {
			line = l
		}
	}
	if !strings.Contains(line, fmt.Sprintf("HTTP drain cut %d in-flight request(s) after 3s: GET /r00 (age ", n)) {
		t.Fatalf("the cut line does not start with the oldest request: %s", line)
	}
	last := -1
	for i := range 20 {
		at := strings.Index(line, fmt.Sprintf("GET /r%02d (age ", i))
		if at < 0 || at < last {
			t.Fatalf("GET /r%02d missing or out of order (oldest first) in: %s", i, line)
		}
		last = at
	}
	for i := 20; i < n; i++ {
		if strings.Contains(line, fmt.Sprintf("/r%02d", i)) {
			t.Fatalf("the line names more than 20 requests (/r%02d): %s", i, line)
		}
	}
	if !strings.Contains(line, ", and 3 more") {
		t.Fatalf("the line does not end with \", and 3 more\": %s", line)
	}
}

// "A service that never started background work logs no join line at all."
func TestNoBackgroundWorkNoJoinLine(t *testing.T) {
	h := started(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second})
	h.endWindow(time.Second)
	h.waitOK(t)
	if logs := h.logs.String(); strings.Contains(logs, "lameduck: join") || !strings.Contains(logs, "lameduck: stopped") {
		t.Fatalf("a service without background work logged a join line (or never stopped):\n%s", logs)
	}
}

// Teardown hooks run "for at most LAMEDUCK_HOOK_SHARE × T together …, and never
// past the HTTP drain's end, so in-flight requests always keep a share": with
// a share of 0.9 of T = 4s and a tail of 1s kept for a join and a closer, the
// hooks' deadline is the HTTP drain's end at 3s, not 3.6s.
func TestTeardownHooksNeverPastTheHTTPDrainsEnd(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 4 * time.Second, HookShare: 0.9})
	done := make(chan struct{})
	if err := h.lc.GoWrite("audit-row", 0, func(context.Context) error { close(done); return nil }); err != nil {
		t.Fatal(err)
	}
	recv(t, done, "the write to run")
	if err := h.lc.AddCloser("db", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A hook that ignores its context: whether one that returns ctx.Err() at
	// its deadline counts as an overrun depends on the clock (see the
	// closing note), so this one is still running at the deadline for sure.
	stuck, entered := make(chan struct{}), make(chan struct{})
	defer close(stuck)
	if err := h.lc.AddTeardownHook("dispatcher", func(context.Context) error { close(entered); <-stuck; return nil }); err != nil {
		t.Fatal(err)
	}
	h.serve(okHandler)
	h.start(t)
	h.endWindow(time.Second)
	recv(t, entered, "the hook to run")
	await(t, h.lc.Events().HTTPDrained) // nothing in flight: its deadline's timer is stopped
	h.timers(1)                         // the hook's deadline
	h.clock.Advance(3 * time.Second)
	err := h.wait()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"dispatcher"`) {
		t.Fatalf("Run = %v; want the hook's overrun (exit 1)", err)
	}
	if want := `teardown hook \"dispatcher\" overran the hooks' share 3s of the teardown budget`; !strings.Contains(h.logs.String(), want) {
		t.Fatalf("the log lacks %s (the HTTP drain's end, before 0.9 × 4s):\n%s", want, h.logs)
	}
}
