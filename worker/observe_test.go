package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck/worker"
)

// While a job runs, /healthz says busy with the job's name and age, and
// so does /readyz once draining; the drain's log lines count it in
// in_flight (they counted HTTP requests only: in_flight=0).
func TestProbesAndDrainLogCountTheJobInFlight(t *testing.T) {
	src, hd := newSource(), newHandler()
	h := serving(t, worker.Config{}, nil, src, hd)
	if _, body := h.probe("/healthz"); body["busy"] != nil {
		t.Fatalf("idle /healthz %v: no busy field while no job runs", body)
	}
	j, _ := startJob(t, src, hd, "job-4")
	h.clock.Advance(90*time.Minute + 412*time.Millisecond) // to the millisecond: a short job is not "0s"
	body := h.expect("/healthz", 200, "ok")
	if body["busy"] != true || body["job"] != "job-4" || body["job_age"] != "1h30m0.412s" || body["jobs_in_flight"] != float64(1) || body["loop"] != "jobs" {
		t.Fatalf("mid-job /healthz %v: want busy, job job-4, job_age 1h30m0.412s", body)
	}
	h.shutdown()
	body = h.expect("/readyz", 503, "draining")
	if body["busy"] != true || body["job"] != "job-4" || body["job_age"] != "1h30m0.412s" {
		t.Fatalf("draining /readyz %v: want busy, job job-4, job_age 1h30m0.412s", body)
	}
	body = h.expect("/healthz", 200, "ok")
	if body["busy"] != true {
		t.Fatalf("draining /healthz %v: want busy", body)
	}
	hd.finish(t, nil)
	if got := j.outcome(t); got != "ack" {
		t.Fatalf("job ended %q", got)
	}
	if err := h.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	logs := h.logs.String()
	draining := logs[strings.Index(logs, "lameduck: draining"):]
	draining = draining[:strings.Index(draining, "\n")]
	if !strings.Contains(draining, "in_flight=1") {
		t.Fatalf("the draining line does not count the job in flight: %s", draining)
	}
}

// A fetch that ends in silence (ErrNoReply: no job, no end of the request,
// no heartbeat) is a failed cycle: a loop that gets only silence fails
// liveness after its threshold, however often it asks; one that gets
// errors (the queue refuses) or idle answers keeps cycling.
func TestSilentFetchesFailLiveness(t *testing.T) {
	src, hd := newSilentSource(), newHandler()
	h := withLoop(t, worker.Config{}, nil, src, hd.Handle, time.Second)
	h.boot(src.fakeSource)
	// Each round: the fetch ends as told, the loop pauses 1s (its timer and
	// the epoch poller's are then both armed), and 30s pass.
	round := func(end chan struct{}) {
		t.Helper()
		awaitFetch(t, src.fakeSource)
		send(t, end, struct{}{}, "the fetch's end")
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if err := h.clock.WaitForTimers(ctx, 2); err != nil {
			t.Fatalf("the loop never paused after the fetch: %v", err)
		}
		h.clock.Advance(30 * time.Second)
	}
	for range 6 { // 3m of refused fetches: cycles
		round(src.fail)
	}
	h.expect("/healthz", 200, "ok")
	for range 5 { // 2m30s of silence, past the 2m threshold
		round(src.silent)
	}
	body := h.expect("/healthz", 503, "stalled")
	if body["silent_fetches"] != float64(5) || body["loop"] != "jobs" {
		t.Fatalf("body %v: want 5 silent fetches of loop jobs", body)
	}
	if !strings.Contains(h.logs.String(), "fetch got no reply from the queue server") {
		t.Fatal("the silence was not logged")
	}
	awaitFetch(t, src.fakeSource)
	src.idleCycle(t) // the server answers again: a cycle
	awaitFetch(t, src.fakeSource)
	h.expect("/healthz", 200, "ok")
}
