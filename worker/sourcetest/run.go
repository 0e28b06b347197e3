package sourcetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Run runs the conformance suite against the queue h describes, each
// scenario a subtest of t, and logs the verdict table (scenario, published,
// completed, duplicates, lost, dead-lettered, hand-backs, drains, time).
// It fails on one job off: a scenario fails when a job is lost (never
// completed, and neither pending nor dead-lettered at the queue), still
// pending at the queue once every runner stopped, dead-lettered though its
// handler does not always fail, or completed twice while every connection
// stayed up; when the Source breaks its side of worker.Source's contract
// (a Fetch that returns a job and an error, or past its wait and the round
// trip; an Ack or HandBack that fails with the connection up; a Drain that
// returns an error after a clean drain; a panic); when the runner breaks
// its side (a job settled twice or never, a hand-back without its cause);
// or when a goroutine or a connection through the relay outlives the
// closed Sources by 5s. Each failure names the jobs, the counts and, with
// the runners' last log lines, what happened.
//
// Every scenario resets the queue (Harness.Reset), publishes its jobs,
// runs o.Runners runners of o.Loops loops each on a Source of their own
// (Harness.NewSource, through a [Relay] adding o.Latency), disturbs them,
// waits for every job, drains every runner and counts from the queue
// (Harness.Count) and from the handlers' own records. The runners are
// worker.Workers on the real clock with short settings (FetchWait
// o.FetchWait, FailureBackoff 10ms, EpochMismatchDelay 200ms, EpochPoll
// 50ms, ShutdownTeardown 5s). The suite sits between each loop and its
// Source: it passes every call through and records it, and it paces the
// runners, one share of the jobs between two drains, by answering some
// fetches itself with an idle cycle (after the fetch wait, or at once
// while a runner starts) instead of calling the Source's Fetch; so that
// each drain finds jobs in flight and a fetch under way, it may also hold
// a job a Fetch returned, or a handler before it starts, until the drain
// has begun. The table's drains count every runner drained, the last ones
// included. The scenarios, by name (Options.Scenarios):
//
//   - backlog-complete: o.Jobs jobs of 1ms to 5ms each; o.Drains times, a
//     runner is drained in mode complete while it holds jobs (half its loops
//     in handlers, the rest in fetches that returned as the drain began) and
//     a fresh one, with a fresh Source, takes its place;
//   - backlog-interrupt: the same in mode interrupt, the handlers returning
//     at their context's end;
//   - last-delivery-complete, last-delivery-interrupt: the same with a
//     delivery limit of 1 (o.Jobs/5 jobs): no job may be dead-lettered by
//     the runner's own hand-backs;
//   - failures: a fifth of the jobs fail (an error or a panic) on their
//     first attempt, with no limit, among drains: each completes later and
//     none is dead-lettered;
//   - failures-limit: a limit of 2, a fifth of the jobs failing once and 5
//     failing always: exactly those 5 are dead-lettered;
//   - drain-bound: a drain bound of 400ms (plus 4 × o.Latency) that the
//     held handlers outlast, then honour: each is handed back and later done;
//   - epochs: the runners' EpochSource moves to a newer epoch while they
//     hold jobs: the old runners' fetched jobs are handed back, those in
//     flight finish where they are, none is lost or run twice;
//   - trickle: a delivery limit of 1 and o.Jobs/10 jobs (10 to 100)
//     published one at a time, a random pause under a fetch wait apart, while
//     the runners wait in their fetches, so each reaches a fetch at a random
//     point of its wait (its very end included), among drains: a Source
//     that gives up on a request the queue may still answer loses the job;
//   - broken: every connection through the relay is cut mid-flow, then the
//     runners are replaced (as the kubelet restarts a stalled runner): none
//     is lost; duplicates are reported, not failed (at least once);
//   - restart: the same with Harness.Restart instead of a cut; skipped when
//     Restart is nil.
//
// Short mode (o.Short or go test -short) runs every scenario at about a
// fifth of the size, within a minute or two per queue on two cores. Run
// calls t.Fatal at once for a Harness that lacks a required field or an
// unknown scenario name. It must not run in parallel with other tests of
// the process: the leak check counts every goroutine.
func Run(t *testing.T, h Harness, o Options) {
	t.Helper()
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
	o = o.resolved()
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	selected, err := pick(o.Scenarios)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lameduck: sourcetest: %s at %s: %d jobs, %d drains, %d runners × %d loops, latency %s, fetch wait %s, seed %d (Options.Seed replays it)",
		h.Name, h.Addr, o.Jobs, o.Drains, o.Runners, o.Loops, o.Latency, o.FetchWait, o.Seed)
	var vs []verdict
	for _, s := range selected {
		t.Run(s.name, func(t *testing.T) {
			v := play(t.Context(), h, o, s)
			vs = append(vs, v)
			if v.skipped != "" {
				t.Skip("lameduck: sourcetest: skipped: " + v.skipped)
			}
			for _, n := range v.notes {
				t.Log(n)
			}
			for _, f := range v.failures {
				t.Errorf("lameduck: sourcetest: %s: %s", h.Name, f)
			}
			if v.failed() && v.logs != "" {
				t.Logf("the runners' last log lines:\n%s", v.logs)
			}
			t.Logf("hand-backs by cause: %s", v.causes)
		})
	}
	t.Log("lameduck: sourcetest: verdict for " + h.Name + "\n" + table(vs))
}

// check reports a Harness that lacks a required field.
func (h Harness) check() error {
	var missing []string
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"Name", h.Name != ""}, {"Addr", h.Addr != ""}, {"Reset", h.Reset != nil}, {"Publish", h.Publish != nil},
		{"NewSource", h.NewSource != nil}, {"Count", h.Count != nil},
	} {
		if !f.ok {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("lameduck: sourcetest: Harness %q lacks %s: each is required (only Restart and IgnoreGoroutines may be left unset)",
			h.Name, strings.Join(missing, ", "))
	}
	return nil
}

// pick returns the scenarios named, in Run's order; every one when names is
// empty.
func pick(names []string) ([]scenario, error) {
	if len(names) == 0 {
		return scenarios, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []scenario
	for _, s := range scenarios {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	if len(want) > 0 {
		var unknown, known []string
		for n := range want {
			unknown = append(unknown, fmt.Sprintf("%q", n))
		}
		for _, s := range scenarios {
			known = append(known, s.name)
		}
		return nil, errors.New("lameduck: sourcetest: Options.Scenarios names unknown scenario(s) " + strings.Join(unknown, ", ") +
			"; the scenarios are " + strings.Join(known, ", "))
	}
	return out, nil
}

// table renders the verdicts as a text table, one row per scenario.
func table(vs []verdict) string {
	head := []string{"scenario", "published", "completed", "duplicates", "lost", "dead-lettered", "hand-backs", "drains", "time", "result"}
	rows := [][]string{head}
	for _, v := range vs {
		result := "ok"
		switch {
		case v.skipped != "":
			result = "skipped"
		case v.failed():
			result = fmt.Sprintf("FAIL (%d)", len(v.failures))
		}
		rows = append(rows, []string{v.name, itoa(v.published), itoa(v.completed), itoa(v.duplicates), itoa(v.lost),
			itoa(v.deadLettered), itoa(v.handBacks), itoa(v.drains), v.took.Round(10 * time.Millisecond).String(), result})
		if v.skipped != "" {
			rows[len(rows)-1] = []string{v.name, "-", "-", "-", "-", "-", "-", "-", "-", result}
		}
	}
	width := make([]int, len(head))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			if i > 0 {
				b.WriteString(" | ")
			}
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i == 0 || i == len(r)-1 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// itoa renders a count; -1 (unknown: the queue could not be counted) as "?".
func itoa(n int) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}
