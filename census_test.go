package lameduck_test

import (
	"context"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// census lists every goroutine lameduck itself starts, by the function that
// starts it, with what joins it, so that no goroutine outlives Run unseen.
// A goroutine started anywhere else in the package fails TestCensus until it
// is listed here with its join.
var census = map[string]string{
	"(*Lifecycle).watchSignals":       "the signal loop (stopped and waited for before Run returns)",
	"(*Lifecycle).serve":              "one Serve per server (returns when teardown shuts it down; waited for in drainHTTP)",
	"(*Lifecycle).startBoot":          "the startup tasks (waited for up to the end of the bound, or named as still running)",
	"(*Lifecycle).drainDeadline":      "the HTTP drain budget's timer (waited for before drainHTTP returns)",
	"(*Lifecycle).awaitFirstRequests": "the accept grace's timer (waited for before it returns)",
	"(*Lifecycle).shutdownServers":    "one graceful Shutdown per server (waited for)",
	"(*Lifecycle).teardown":           "the teardown hooks, run beside the HTTP drain (waited for before the join)",
	"(*Lifecycle).GoWrite":            "the write (counted in the registry by name; the join waits for it or names it)",
	"(*Lifecycle).GoLoop":             "the loop (cancelled at the signal; the join waits for it or names it)",
	"(*Lifecycle).callUntil":          "a teardown hook or closer (waited for until its deadline, else named once)",
	"(*Lifecycle).withTimeout":        "a deadline on an injected fake clock (ends with its context); none on the system clock",
	"(*tracker).refresh":              "the coarse clock's timer callback (reads the clock and returns; re-armed only while requests keep arriving, never after the signal)",
	"(*Lifecycle).startRefresh": "the readiness refresh, Checker.RunRefresh (its context ends at the signal; " +
		"Run waits for it before it returns, up to the end of the bound)",
	"(*Lifecycle).awaitRefresh": "a wait for the refresh goroutine (returns with it)",
	"(*Lifecycle).callStartup": "one try of a startup task (waited for; at the boot's budget for 100ms more, " +
		"then named as still running, again at exit if it still is; at the signal, up to the end of the bound)",
}

var frameRE = regexp.MustCompile(`(?m)^github\.com/lameduck/lameduck\.(\(\*?\w+\)\.\w+|\w+)(?:\.func\d+)*(?:\.\d+)*\(`)

// starters returns the lameduck functions whose goroutines are alive, named
// by the outermost lameduck frame of each goroutine's stack.
func starters() []string {
	var out []string
	for _, g := range strings.Split(testsupport.AllStacks(), "\n\n") {
		if strings.Contains(g, "lameduck_test.") && !strings.Contains(g, "created by github.com/lameduck/lameduck.") &&
			!strings.Contains(g, "created by sync.(*WaitGroup).Go") {
			continue // the test's own goroutines
		}
		m := frameRE.FindAllStringSubmatch(g, -1)
		if len(m) == 0 {
			continue
		}
		out = append(out, m[len(m)-1][1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestCensus(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second})
	seen := map[string]bool{}
	look := func() {
		for _, s := range starters() {
			seen[s] = true
		}
	}
	boot := make(chan struct{})
	inBoot := make(chan struct{})
	h.lc.AddStartupTask("warm-up", func(context.Context) error { close(inBoot); <-boot; return nil })
	hook := make(chan struct{})
	inHook := make(chan struct{})
	h.lc.AddTeardownHook("dispatcher", func(context.Context) error { close(inHook); <-hook; return nil })
	write := make(chan struct{})
	h.lc.GoWrite("audit-row", time.Minute, func(context.Context) error { <-write; return nil })
	h.lc.GoLoop("lease", func(ctx context.Context) error { <-ctx.Done(); return nil })
	// A check with Refresh: serving starts its refresh, a goroutine of the
	// Lifecycle's own that the signal stops and Run waits for.
	if err := h.lc.AddCheck(health.Check{Name: "db", MaxAge: time.Hour, Refresh: true,
		Func: func(context.Context) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	req := make(chan struct{})
	inReq := make(chan struct{})
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { close(inReq); <-req }))
	h.run()
	recv(t, inBoot, "inBoot")
	look() // booting, with a write and a loop running
	close(boot)
	await(t, h.lc.Events().StartupDone)
	look() // serving: the refresh loop runs
	c := client(t)
	sendAsync(c, "GET", base+"/")
	recv(t, inReq, "inReq")
	h.lc.BeginShutdown("test")
	h.timers(2) // the write's own deadline and the window
	h.clock.Advance(time.Second)
	await(t, h.lc.Events().WindowEnded)
	recv(t, inHook, "inHook")
	look() // in a teardown hook
	close(hook)
	await(t, h.lc.Events().HooksDone)
	// Draining HTTP with a request in flight: wait until its goroutines show.
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(starters(), "(*Lifecycle).shutdownServers") && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	look()
	close(req)
	close(write)
	h.waitOK(t)

	for s := range seen {
		if _, ok := census[s]; !ok {
			t.Errorf("goroutine started by %s is not in the census: list it with what joins it", s)
		}
	}
	for _, want := range []string{"(*Lifecycle).serve", "(*Lifecycle).startBoot", "(*Lifecycle).GoWrite", "(*Lifecycle).GoLoop",
		"(*Lifecycle).callUntil", "(*Lifecycle).drainDeadline", "(*Lifecycle).shutdownServers", "(*Lifecycle).callStartup"} {
		if !seen[want] {
			t.Errorf("the census run never saw a goroutine of %s; the test no longer exercises it (saw %v)", want, seen)
		}
	}
	// goleak (TestMain) checks that none of them outlives the test.
}
