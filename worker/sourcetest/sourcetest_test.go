package sourcetest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ackWait is the memqueue's ack wait in these tests.
const ackWait = time.Second

func newServer(t *testing.T) *memServer {
	t.Helper()
	srv, err := newMemServer(ackWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.close)
	return srv
}

// A correct Source passes every scenario.
func TestMemQueuePasses(t *testing.T) {
	Run(t, memHarness(newServer(t), correct), Options{Short: testing.Short()})
}

// ... and passes the backlog and trickle scenarios over a slow link.
func TestMemQueuePassesWithLatency(t *testing.T) {
	Run(t, memHarness(newServer(t), correct), Options{Short: true, Jobs: 100, Latency: 100 * time.Millisecond,
		Scenarios: []string{"backlog-complete", "backlog-interrupt", "trickle"}})
}

// The suite finds a Source broken on purpose, and says what it lost: the
// scenario's verdict fails, naming the jobs.
func TestSuiteFindsBrokenSources(t *testing.T) {
	for _, c := range []struct {
		variant, scenario string
		want              func(v verdict) bool
		wantText          string
	}{
		{earlyFetch, "trickle", func(v verdict) bool { return v.deadLettered > 0 }, "dead-lettered"},
		{nakCounts, "last-delivery-interrupt", func(v verdict) bool { return v.deadLettered > 0 }, "back for their own reasons (HandBackCause not nil)"},
		{handBackAcks, "backlog-interrupt", func(v verdict) bool { return v.lost > 0 }, "lost"},
	} {
		t.Run(c.variant, func(t *testing.T) {
			s, err := pick([]string{c.scenario})
			if err != nil {
				t.Fatal(err)
			}
			o := Options{Short: true, Jobs: 100, Drains: 3, Seed: 1, Wait: 20 * time.Second}.resolved()
			v := play(context.Background(), memHarness(newServer(t), c.variant), o, s[0])
			t.Logf("verdict:\n%s\nfailures:\n%s\nnotes:\n%s", table([]verdict{v}), strings.Join(v.failures, "\n"), strings.Join(v.notes, "\n"))
			if !v.failed() || !c.want(v) {
				t.Fatalf("the suite did not find the broken Source %s in %s: failures %q", c.variant, c.scenario, v.failures)
			}
			if !strings.Contains(strings.Join(v.failures, "\n"), c.wantText) {
				t.Fatalf("the failures do not say %q: %q", c.wantText, v.failures)
			}
		})
	}
}

// Run refuses a Harness without its required fields, and Options.Scenarios
// naming an unknown scenario, saying which.
func TestHarnessAndScenarioNames(t *testing.T) {
	err := Harness{Name: "x", Addr: "127.0.0.1:1"}.check()
	if err == nil || !strings.Contains(err.Error(), "Reset, Publish, NewSource, Count") {
		t.Fatalf("check of a Harness without functions: %v", err)
	}
	if _, err := pick([]string{"backlog-complete", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("pick of an unknown name: %v", err)
	}
	s, err := pick([]string{"trickle", "backlog-complete"})
	if err != nil || len(s) != 2 || s[0].name != "backlog-complete" {
		t.Fatalf("pick: %v, %v; want backlog-complete then trickle", s, err)
	}
}

// Run itself fails the test on a lost job, and logs the table that says
// so: the test runs Run against a Source broken on purpose in a child
// process of its own binary, and reads the child's verdict.
func TestRunFailsOnALostJob(t *testing.T) {
	if os.Getenv("SOURCETEST_CHILD") == "1" {
		Run(t, memHarness(newServer(t), handBackAcks), Options{Short: true, Jobs: 100, Drains: 3, Wait: 20 * time.Second,
			Scenarios: []string{"backlog-interrupt"}})
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRunFailsOnALostJob$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SOURCETEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("Run passed a Source that loses the jobs it hands back:\n%s", out)
	}
	for _, want := range []string{"--- FAIL: TestRunFailsOnALostJob/backlog-interrupt", "lameduck: sourcetest: memqueue/handback-acks: lost ", "FAIL (1)"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the child's output lacks %q:\n%s", want, out)
		}
	}
}
