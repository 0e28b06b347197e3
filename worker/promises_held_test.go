package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck/worker"
)

// docs/runners.md: "/startupz: 503 starting, then 200 ok — 200 once every
// loop has cycled once".
func TestStartupzWaitsForTheFirstCycle(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := newHarness(t, worker.Config{}, nil)
	if err := h.w.AddLoop(worker.Loop{Name: "jobs", Source: src, Handle: hd.Handle}); err != nil {
		t.Fatal(err)
	}
	h.run()
	awaitFetch(t, src) // the loop runs, but has not cycled
	h.expect("/startupz", 503, "starting")
	src.idleCycle(t)
	h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
	h.expect("/startupz", 200, "ok")
}

// docs/runners.md: "Without LAMEDUCK_TERMINATION_GRACE a runner's teardown
// defaults to 30s in Kubernetes (60s elsewhere), and the log warns that 8h +
// 30s exceeds Kubernetes' default grace period of 30s."
func TestRunnerTeardownWithoutAGrace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		teardown time.Duration
		log      string
	}{
		{"kubernetes", map[string]string{"LAMEDUCK_ENV": "kubernetes"}, 30 * time.Second,
			"runner drain bound 8h0m0s + teardown 30s = 8h0m30s exceeds Kubernetes' default terminationGracePeriodSeconds 30s"},
		{"local", nil, time.Minute, "runner drain bound 8h0m0s + teardown 1m0s = 8h1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, hd := newSource(), newHandler()
			h := serving(t, worker.Config{}, tc.vars, src, hd)
			if got := h.w.Lifecycle().Config().ShutdownTeardown; got != tc.teardown {
				t.Fatalf("teardown %s; want %s", got, tc.teardown)
			}
			if logs := h.logs.String(); !strings.Contains(logs, tc.log) {
				t.Fatalf("the budget line lacks %q:\n%s", tc.log, logs)
			}
		})
	}
}
