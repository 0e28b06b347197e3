package testsupport

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/lameducktest"
)

// Ready is a serving Lifecycle with the checks under test; Probe reads its
// /readyz through the real probe handler, one probe at a time.
type Ready struct {
	lc *lameduck.Lifecycle
}

// Answer is one /readyz answer.
type Answer struct {
	Code   int
	Status string
	Checks map[string]string
	Body   string
}

// Serve starts a Lifecycle (on lameducktest's fake clock, which the checks'
// deadlines do not use) with checks, and shuts it down in t's cleanup.
// A check without a Timeout of its own has Timeout (10s of real time), not
// the 1s default. Bodies show the checks' redacted details (CheckDetails
// "show"), which the tests read.
func Serve(t testing.TB, checks ...health.Check) *Ready {
	t.Helper()
	lc, clk := NewLifecycle(t, lameduck.Config{ShutdownDelay: time.Second, CheckDetails: lameduck.CheckDetailsShow,
		CheckTimeout: Timeout})
	for _, c := range checks {
		if err := lc.AddCheck(c); err != nil {
			t.Fatal(err)
		}
	}
	wait := lameducktest.Start(t, lc)
	t.Cleanup(func() {
		lameducktest.EndWindow(t, lc, clk)
		if err := wait(); err != nil {
			t.Error(err)
		}
	})
	return &Ready{lc: lc}
}

// Probe answers GET /readyz once.
func (r *Ready) Probe(t testing.TB) Answer {
	t.Helper()
	rec := httptest.NewRecorder()
	r.lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	a := Answer{Code: rec.Code, Body: rec.Body.String()}
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz body %q: %v", a.Body, err)
	}
	a.Status, a.Checks = body.Status, body.Checks
	return a
}

// Want fails t unless a has code, status, and name's text beginning with
// word ("ok", "error", "timeout", "stalled"; several words separated by |
// mean any of them).
func (a Answer) Want(t testing.TB, what string, code int, status, name, word string) {
	t.Helper()
	text := a.Checks[name]
	ok := false
	for w := range strings.SplitSeq(word, "|") {
		ok = ok || text == w || strings.HasPrefix(text, w+":")
	}
	if a.Code != code || a.Status != status || !ok {
		t.Fatalf("%s: /readyz = %d %s with %s=%q, want %d %s with %s %s; body %s",
			what, a.Code, a.Status, name, text, code, status, name, word, a.Body)
	}
}

// Timeout is the deadline of a check that must answer "ok": a ping of a
// working server takes milliseconds, but on a loaded machine (-race, two
// cores, other test binaries) a goroutine can wait a second or two for a
// CPU, which a 1s deadline (health.DefaultCheckTimeout) would report as
// "timeout". Tests give it to every check that must pass.
const Timeout = 10 * time.Second

// StallTimeout is the deadline of the check that Faults' stall case waits
// out: a load stall can only make it report "timeout" sooner, never turn
// its "timeout" or "stalled" into something else.
const StallTimeout = time.Second

// Faults is the fault scenario every contrib check goes through against a
// real server: an outage and a recovery, critical then not, and a server
// that accepts and never answers.
type Faults struct {
	// Check builds the check under test, named name, critical or not. Its
	// Timeout is the harness's: Timeout where a probe must answer "ok" or
	// at once "error", StallTimeout where the probes wait a stall out.
	Check func(t testing.TB, name string, critical bool) health.Check
	// Down starts an outage and Up ends it; Stall makes the server accept
	// and never answer (nil skips the stall case), until Up.
	Down, Up, Stall func(t testing.TB)
	// Secrets must never appear in a body (the password of the URL, say).
	Secrets []string
	// OutageWord is what the first probe of an outage must say of the
	// check: "error" when empty; "error|timeout" for a client that retries
	// a refused dial until the deadline.
	OutageWord string
}

// Run goes through the scenario:
//
//   - critical: ok; Down → the next probe is 503 failed, the check
//     "error"; Up → the next probe is 200 ok (a Timeout deadline);
//   - degraded: the same with a non-critical check: 200 degraded;
//   - stalled: the client under test behind two Lifecycles, one checking
//     it with a Timeout deadline, the other with StallTimeout: ok (the
//     first); Stall → 503 with "timeout" (the second), later probes
//     "timeout" or "stalled", and the goroutine count does not grow with
//     the probes; Up → the captive ping (if any) returns, and a probe that
//     pings afresh is 200 ok (the first).
func (f Faults) Run(t *testing.T) {
	t.Run("critical", func(t *testing.T) { f.outage(t, true) })
	t.Run("degraded", func(t *testing.T) { f.outage(t, false) })
	if f.Stall != nil {
		t.Run("stalled", f.stalled)
	}
}

func (f Faults) noSecrets(t testing.TB, a Answer) {
	t.Helper()
	for _, s := range f.Secrets {
		if s != "" && strings.Contains(a.Body, s) {
			t.Fatalf("a secret (%q) reached the body: %s", s, a.Body)
		}
	}
}

func (f Faults) outage(t *testing.T, critical bool) {
	c := f.Check(t, "dep", critical)
	c.Timeout = Timeout
	r := Serve(t, c)
	r.Probe(t).Want(t, "before the outage", 200, "ok", "dep", "ok")
	f.Down(t)
	a := r.Probe(t)
	word := f.OutageWord
	if word == "" {
		word = "error"
	}
	if critical {
		a.Want(t, "first probe of the outage", 503, "failed", "dep", word)
	} else {
		a.Want(t, "first probe of the outage", 200, "degraded", "dep", word)
	}
	f.noSecrets(t, a)
	f.Up(t)
	r.Probe(t).Want(t, "first probe after recovery", 200, "ok", "dep", "ok")
}

func (f Faults) stalled(t *testing.T) {
	c := f.Check(t, "dep", true)
	// The probes that must pass (before the stall, and afresh after it)
	// have the Timeout deadline: the first ping and the one after the
	// stall may dial, which a loaded machine can delay past a second. The
	// probes of the stall have StallTimeout, which they wait out. Both
	// Lifecycles ping through the same Func, so through one client: the
	// connection the stall catches is the one the first probe made, and
	// the one the probe after it finds is whatever the stall left.
	long, short := c, c
	long.Timeout, short.Timeout = Timeout, StallTimeout
	var pinging atomic.Int64 // the stall Lifecycle's pings that have not returned
	short.Func = func(ctx context.Context) error {
		pinging.Add(1)
		defer pinging.Add(-1)
		return c.Func(ctx)
	}
	ok, r := Serve(t, long), Serve(t, short)
	ok.Probe(t).Want(t, "before the stall", 200, "ok", "dep", "ok")
	f.Stall(t)
	r.Probe(t).Want(t, "first probe of the stall", 503, "failed", "dep", "timeout")
	base := settled(0)
	for range 4 {
		a := r.Probe(t)
		a.Want(t, "probe of the stall", 503, "failed", "dep", "timeout|stalled")
		f.noSecrets(t, a)
	}
	// One captive ping at most, and whatever a redial holds for a moment:
	// never one goroutine per probe.
	if n := settled(base + 2); n > base+2 {
		t.Fatalf("goroutines grew from %d to %d over 4 stalled probes:\n%s", base, n, AllStacks())
	}
	f.Up(t)
	// A captive ping returns when the server answers again (or its
	// connection is closed); then a fresh ping must pass.
	deadline := time.Now().Add(Guard)
	for pinging.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a ping of the stall was still captive %s after it ended:\n%s", Guard, AllStacks())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ok.Probe(t).Want(t, "first fresh probe after the stall", 200, "ok", "dep", "ok")
}

// settled returns the goroutine count once it is at most want, or after
// 20s (a passing run returns at once; a loaded machine may keep goroutines
// on their way out off the CPU for seconds, and a connect a client started
// for a stalled probe and finishes on its own, pgx's pool's, ends only at
// the client's connect timeout); want 0: after a short pause.
func settled(want int) int {
	deadline := time.Now().Add(20 * time.Second)
	if want == 0 {
		deadline = time.Now().Add(200 * time.Millisecond)
	}
	for {
		n := runtime.NumGoroutine()
		if (want > 0 && n <= want) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}
