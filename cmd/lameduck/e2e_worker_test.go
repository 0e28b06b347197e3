package main

// End-to-end tests of `lameduck demo-worker`: the real binary against a
// real JetStream — a private server embedded in this test process (started
// fresh, store in a temp dir), the machine's server when it answers, and the
// binary's own embedded server — and against the machine's RabbitMQ and
// PostgreSQL (e2e_worker_queues_test.go), driven by real signals.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jobsTimeout bounds how long a batch of jobs may take to be done.
const jobsTimeout = 90 * time.Second

// privateJetStream starts a NATS server with JetStream in this process, on
// a free loopback port with its store in a temp dir, and returns its URL.
func privateJetStream(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(embeddedStart) {
		t.Fatalf("the test's NATS server did not accept connections within %s", embeddedStart)
	}
	return ns.ClientURL()
}

// machineJetStream returns the URL of the machine's NATS server
// (LDTEST_NATS_URL, default nats://127.0.0.1:4222) when it answers with
// JetStream; it skips the test otherwise, or fails it when CI is set.
func machineJetStream(t *testing.T) string {
	t.Helper()
	url := os.Getenv("LDTEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.NoReconnect())
	if err == nil {
		defer nc.Close()
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = js.AccountInfo(ctx)
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("NATS with JetStream at %s: %v (CI is set: the server must run)", url, err)
		}
		t.Skipf("no NATS with JetStream at %s: %v", url, err)
	}
	return url
}

// uniqueQueue returns a queue name no other run uses, and on a shared
// server removes its stream and epoch key when the test ends.
func uniqueQueue(t *testing.T, url string) string {
	t.Helper()
	q := fmt.Sprintf("e2e_%d_%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.NoReconnect())
		if err != nil {
			return // a private server is gone already
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, demoStream(q))
		if kv, err := js.KeyValue(ctx, ldnats.DefaultEpochBucket); err == nil {
			if keys, err := kv.ListKeysFiltered(ctx, q+".*"); err == nil {
				for k := range keys.Keys() {
					_ = kv.Purge(ctx, k)
				}
			}
		}
	})
	return q
}

// workerEnv is the environment of every worker the tests start: a short
// fetch wait so a loop cycles (and turns ready) at once.
func workerEnv(extra map[string]string) map[string]string {
	env := map[string]string{"LAMEDUCK_FETCH_WAIT": "200ms"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startWorker starts `lameduck demo-worker` on url and queue q with its
// probes on a free loopback port and a 2s ack wait, and waits until
// /readyz answers 200.
func startWorker(t *testing.T, url, q string, env map[string]string, args ...string) *proc {
	t.Helper()
	return startWorkerKeeping(t, url, q, env, append([]string{"--ack-wait", "2s"}, args...)...)
}

// startWorkerKeeping is startWorker without --ack-wait: an existing
// consumer keeps its own.
func startWorkerKeeping(t *testing.T, url, q string, env map[string]string, args ...string) *proc {
	t.Helper()
	argv := append([]string{"demo-worker", "--log-format", "json", "--name", q, "--probe-addr", "127.0.0.1:0",
		"--epoch-poll", "200ms"}, args...)
	if url != "" {
		argv = append(argv, "--nats", url)
	}
	p := startCmd(t, workerEnv(env), argv...)
	p.listening()
	p.waitServing(startTimeout)
	return p
}

// enqueue runs `lameduck demo-worker enqueue` and returns the job ids.
func enqueue(t *testing.T, q string, n int, d time.Duration, where ...string) []string {
	t.Helper()
	argv := append([]string{"demo-worker", "enqueue", "--name", q, "--n", fmt.Sprint(n), "--d", d.String()}, where...)
	cmd := exec.Command(lameduckBin, argv...)
	cmd.Env = childEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lameduck %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	// "... (ids job-B-0001 to job-B-0050)"
	_, rest, ok := strings.Cut(string(out), "(ids ")
	first, _, ok2 := strings.Cut(rest, " to ")
	if !ok || !ok2 {
		t.Fatalf("enqueue said %q", out)
	}
	prefix := strings.TrimSuffix(first, "0001")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i+1)
	}
	return ids
}

// jobRun is one execution of a job by one process, from its start to its end.
type jobRun struct {
	proc       int
	start, end time.Time
	outcome    string // "done", "stopped" (interrupted, then handed back) or "" (still running)
}

// ledger reads every worker's log into the runs of each job and the
// hand-backs of jobs that were never started.
type ledger struct {
	runs     map[string][]jobRun
	handedBk map[string][]string // job → the reasons of its hand-backs
}

func readLedger(t *testing.T, procs ...*proc) ledger {
	t.Helper()
	lg := ledger{runs: map[string][]jobRun{}, handedBk: map[string][]string{}}
	for i, p := range procs {
		p.mu.Lock()
		lines := append([]logLine(nil), p.lines...)
		p.mu.Unlock()
		for _, l := range lines {
			job, _ := l.rec["job"].(string)
			if job == "" {
				continue
			}
			switch m := l.msg(); {
			case m == "demo-worker: job started":
				lg.runs[job] = append(lg.runs[job], jobRun{proc: i, start: l.at(t)})
			case m == "demo-worker: job done" || m == "demo-worker: job stopped; checkpointing":
				rs := lg.runs[job]
				if len(rs) == 0 || rs[len(rs)-1].proc != i || rs[len(rs)-1].outcome != "" {
					t.Fatalf("process %d ended job %s it had not started: %s", i, job, l.raw)
				}
				rs[len(rs)-1].end = l.at(t)
				rs[len(rs)-1].outcome = map[bool]string{true: "done", false: "stopped"}[m == "demo-worker: job done"]
			case strings.HasPrefix(m, "lameduck: worker: job handed back: "):
				lg.handedBk[job] = append(lg.handedBk[job], strings.TrimPrefix(m, "lameduck: worker: job handed back: "))
			}
		}
	}
	return lg
}

// done counts the jobs of ids done at least once.
func (lg ledger) done(ids []string) int {
	n := 0
	for _, id := range ids {
		for _, r := range lg.runs[id] {
			if r.outcome == "done" {
				n++
				break
			}
		}
	}
	return n
}

// waitDone waits until every job of ids is done, reading the procs' logs.
func waitDone(t *testing.T, ids []string, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(jobsTimeout)
	for {
		lg := readLedger(t, procs...)
		n := lg.done(ids)
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs done after %s", n, len(ids), jobsTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDoneBy waits until proc has done at least n jobs.
func waitDoneBy(t *testing.T, p *proc, n int) {
	t.Helper()
	deadline := time.Now().Add(jobsTimeout)
	for len(p.logMatches(func(l logLine) bool { return l.msg() == "demo-worker: job done" })) < n {
		if time.Now().After(deadline) || p.hasExited() {
			t.Fatalf("the worker did not finish %d jobs", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitInFlight waits until the worker's last job line is a start: a job is
// in flight (for the rest of its duration).
func waitInFlight(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(jobsTimeout)
	for {
		p.mu.Lock()
		last := ""
		for _, l := range p.lines {
			if m := l.msg(); m == "demo-worker: job started" || m == "demo-worker: job done" {
				last = m
			}
		}
		p.mu.Unlock()
		if last == "demo-worker: job started" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no job in flight")
		}
		time.Sleep(time.Millisecond)
	}
}

// check asserts, over the whole ledger: every job done exactly once; no
// job ran twice at once; a job ran more than once only after an
// interruption handed it back. It returns the number of such re-runs.
func (lg ledger) check(t *testing.T, ids []string) (duplicates int) {
	t.Helper()
	for _, id := range ids {
		rs := lg.runs[id]
		dones := 0
		for i, r := range rs {
			if r.outcome == "done" {
				dones++
			}
			if i > 0 {
				prev := rs[i-1]
				if prev.outcome != "stopped" {
					t.Errorf("job %s ran again after a run that ended %q: %+v", id, prev.outcome, rs)
				}
				if prev.end.IsZero() || r.start.Before(prev.end) {
					t.Errorf("job %s ran twice at once: %+v", id, rs)
				}
				duplicates++
			}
		}
		if dones != 1 {
			t.Errorf("job %s done %d times: %+v", id, dones, rs)
		}
	}
	return duplicates
}

// queueCase is a queue a test runs on, one subtest each.
type queueCase struct {
	name string
	open func(*testing.T) testQueue
}

// testQueues are a private JetStream and the machine's RabbitMQ and
// PostgreSQL.
var testQueues = []queueCase{
	{"private JetStream", privateJetStreamQueue},
	{"machine RabbitMQ", rabbitQueue},
	{"machine PostgreSQL", postgresQueue},
}

// A backlog drained by SIGTERMs, a new runner started as the old one
// drains (as a rolling update does), in both drain modes, on every queue:
// every job is done, none twice in complete mode, and one is re-run only
// after an interruption handed it back; the runners' logs and the queue
// itself agree (the queue holds nothing after).
func TestE2EWorkerDrainLosesNoJob(t *testing.T) {
	queues := slices.Insert(slices.Clone(testQueues), 1, queueCase{"machine JetStream", machineJetStreamQueue})
	for _, qs := range queues {
		for _, mode := range []string{"complete", "interrupt"} {
			t.Run(qs.name+"/"+mode, func(t *testing.T) {
				tq := qs.open(t)
				env := map[string]string{"LAMEDUCK_DRAIN_MODE": mode}
				a := tq.start(t, env)
				ids := tq.enqueue(t, 50, 100*time.Millisecond)
				waitDoneBy(t, a, 15)
				waitInFlight(t, a) // so that the drain has a job to finish or hand back
				a.signal(syscall.SIGTERM)
				r := a.waitLog(`"draining"`, startTimeout, msgContains("lameduck: draining"))
				if !strings.Contains(r.msg(), "taking no new job") {
					t.Fatalf("draining line: %s", r.raw)
				}
				// The new worker starts while the old one drains, as a
				// rolling update does.
				b := tq.start(t, env)
				if code, _ := a.waitExit(startTimeout); code != 0 {
					t.Fatalf("the old worker exited %d", code)
				}
				waitDone(t, ids, a, b)
				wantDoneMetric(t, b)
				b.stopCleanly(t, "the new worker")
				lg := readLedger(t, a, b)
				dups := lg.check(t, ids)
				tq.wantEmpty(t)
				interrupted := 0
				for _, id := range ids {
					for _, why := range lg.handedBk[id] {
						if strings.Contains(why, "interrupted by the drain") {
							interrupted++
						}
					}
				}
				t.Logf("%s on %s: 50 jobs, %d done by the old worker, %d re-run after an interruption, 0 left in the queue", mode, tq.kind,
					len(a.logMatches(func(l logLine) bool { return l.msg() == "demo-worker: job done" })), dups)
				switch mode {
				case "complete":
					if dups != 0 || interrupted != 0 {
						t.Fatalf("complete mode: %d re-runs, %d interruptions; want none", dups, interrupted)
					}
					// The job in flight at the signal finished on the old worker.
					sig, _ := a.findLog(msgContains("lameduck: draining"))
					if _, ok := a.findLog(func(l logLine) bool {
						return l.msg() == "demo-worker: job done" && !l.at(t).Before(sig.at(t))
					}); !ok {
						t.Log("no job was in flight at the signal") // possible between two jobs; the counts above still hold
					}
				case "interrupt":
					if dups != interrupted {
						t.Fatalf("interrupt mode: %d re-runs but %d interruptions", dups, interrupted)
					}
				}
			})
		}
	}
}

func TestE2EWorkerStalledLoopFailsLiveness(t *testing.T) {
	url := privateJetStream(t)
	q := uniqueQueue(t, url)
	// The drain never cancels a fetch under way (docs/runners.md, "The
	// drain"), so a wedged one holds the runner for the drain bound (1s
	// here), then until the end of the teardown's hook share (2s of 3s),
	// when the fetch's context ends.
	p := startWorker(t, url, q, map[string]string{"LAMEDUCK_FETCH_WAIT": "50ms", "LAMEDUCK_DRAIN_TIMEOUT": "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN": "3s"},
		"--simulate-stall-after", "5", "--liveness-floor", "1s")
	deadline := time.Now().Add(startTimeout)
	var r reply
	for {
		r = p.get("/healthz")
		if r.code == 503 {
			break
		}
		if r.code != 200 || time.Now().After(deadline) {
			t.Fatalf("GET /healthz = %s; want 200 until 503 stalled", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.status() != "stalled" || r.body["loop"] != "jobs" || r.body["threshold"] != "1s" {
		t.Fatalf("GET /healthz = %s; want 503 stalled naming loop jobs", r)
	}
	idle, err := time.ParseDuration(r.body["idle_for"].(string))
	if err != nil || idle < time.Second {
		t.Fatalf("idle_for %v: want at least the 1s threshold", r.body["idle_for"])
	}
	p.want("/readyz", 200, "ok") // readiness is not liveness
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(startTimeout); code != 1 {
		t.Fatalf("exit %d; want 1: the wedged fetch overran the teardown's hook share", code)
	}
	p.waitLog(`"overran"`, startTimeout, msgContains(`teardown hook "consume loops" overran the hooks' share`))
}

// waitReadyz waits until p's /readyz answers status, failing when it
// answers anything but from or status, or after startTimeout.
func waitReadyz(t *testing.T, p *proc, from, status string) reply {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		r := p.get("/readyz")
		if r.status() == status {
			return r
		}
		if r.status() != from || time.Now().After(deadline) {
			t.Fatalf("GET /readyz = %s; want %q until %q", r, from, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// epochQueues are the queues whose server keeps the fleet's epochs: NATS
// (a key-value bucket) and PostgreSQL (a table).
var epochQueues = []queueCase{
	{"private JetStream", privateJetStreamQueue},
	{"machine PostgreSQL", postgresQueue},
}

// A rollout: the new epoch's runner gets every job at once while the old
// one, superseded, competes for none; a rollback: with the new runner gone,
// the old one is no longer superseded and takes the jobs.
func TestE2EWorkerEpochBumpSupersedesTheOldFleet(t *testing.T) {
	for _, qs := range epochQueues {
		t.Run(qs.name, func(t *testing.T) { testEpochBump(t, qs.open(t)) })
	}
}

func testEpochBump(t *testing.T, tq testQueue) {
	env := map[string]string{"LAMEDUCK_EPOCH_MISMATCH_DELAY": "1s"}
	old := tq.start(t, map[string]string{"LAMEDUCK_EPOCH": "1", "LAMEDUCK_EPOCH_MISMATCH_DELAY": "1s"})
	first := tq.enqueue(t, 5, 50*time.Millisecond)
	waitDone(t, first, old)

	// A runner of the next epoch publishes it: the old one is superseded.
	env["LAMEDUCK_EPOCH"] = "2"
	next := tq.start(t, env)
	r := waitReadyz(t, old, "ok", "superseded")
	if r.body["epoch"] != float64(1) || r.body["newest_epoch"] != float64(2) {
		t.Fatalf("old worker GET /readyz = %s", r)
	}
	old.want("/healthz", 200, "ok")
	next.want("/readyz", 200, "ok")

	// The new runner does every job; the old one runs none and hands back
	// at most one (delivered to the fetch under way as it was superseded).
	ids := tq.enqueue(t, 30, 100*time.Millisecond)
	waitDone(t, ids, old, next)
	lg := readLedger(t, old, next)
	handedBack := 0
	for _, id := range ids {
		for _, run := range lg.runs[id] {
			if run.proc == 0 {
				t.Fatalf("the superseded worker ran job %s", id)
			}
		}
		for _, why := range lg.handedBk[id] {
			if !strings.Contains(why, worker.ErrSuperseded.Error()+": epoch 1 < newest 2") || !strings.Contains(why, "delayed 1s") {
				t.Fatalf("job %s handed back because %q", id, why)
			}
			handedBack++
		}
	}
	if handedBack > 1 {
		t.Fatalf("the superseded worker handed back %d of %d jobs; want at most 1: it competed for work", handedBack, len(ids))
	}
	old.want("/healthz", 200, "ok")

	// A rollback: the epoch-2 runner is gone, so epoch 1 is the newest alive.
	next.stopCleanly(t, "the new worker")
	r = waitReadyz(t, old, "superseded", "ok")
	back := tq.enqueue(t, 5, 50*time.Millisecond)
	waitDone(t, back, old)
	all := append(append(append([]string(nil), first...), ids...), back...)
	if dups := readLedger(t, old, next).check(t, all); dups != 0 {
		t.Fatalf("%d re-runs", dups)
	}
	if _, ok := old.findLog(msgContains("no longer superseded")); !ok {
		t.Fatal("the old worker did not log the rollback")
	}
	old.stopCleanly(t, "the process")
}

// A runner killed without a drain (SIGKILL: its key is never deleted)
// stops counting after three of its polls: the older runner left alone is
// no longer superseded.
func TestE2EWorkerKilledNewerRunnerStopsSuperseding(t *testing.T) {
	for _, qs := range epochQueues {
		t.Run(qs.name, func(t *testing.T) { testKilledNewerRunner(t, qs.open(t)) })
	}
}

func testKilledNewerRunner(t *testing.T, tq testQueue) {
	old := tq.start(t, map[string]string{"LAMEDUCK_EPOCH": "1"})
	next := tq.start(t, map[string]string{"LAMEDUCK_EPOCH": "2"})
	waitReadyz(t, old, "ok", "superseded")
	next.signal(syscall.SIGKILL)
	next.waitExit(startTimeout)
	waitReadyz(t, old, "superseded", "ok")
	ids := tq.enqueue(t, 3, 50*time.Millisecond)
	waitDone(t, ids, old)
	old.stopCleanly(t, "the process")
}

// anyPortAddr is an --embedded-addr on which the embedded NATS server picks
// a free port itself (nats-server's RANDOM_PORT, -1): no port is chosen
// here and bound later, which another process could take in between. The
// server's URL is in the worker's log (embeddedURL).
var anyPortAddr = fmt.Sprintf("127.0.0.1:%d", server.RANDOM_PORT)

// embeddedURL returns the URL of p's embedded NATS server, from its log.
func embeddedURL(t *testing.T, p *proc) string {
	t.Helper()
	l := p.waitLog(`"embedded NATS server with JetStream"`, startTimeout, msgContains("embedded NATS server with JetStream"))
	url, _ := l.rec["url"].(string)
	if url == "" {
		t.Fatalf("the embedded server line names no url: %s", l.raw)
	}
	return url
}

// The binary's own embedded server: no setup, and its store carries the
// queue across a restart (on a port of its own each time: the store, not
// the address, carries the queue).
func TestE2EWorkerEmbeddedServerAcrossRestart(t *testing.T) {
	store := t.TempDir()
	args := []string{"--embedded-addr", anyPortAddr, "--store", store}
	a := startWorker(t, "", "demo", nil, args...)
	url := embeddedURL(t, a)
	ids := enqueue(t, "demo", 12, 150*time.Millisecond, "--nats", url)
	waitDoneBy(t, a, 4)
	a.stopCleanly(t, "the process")
	b := startWorker(t, "", "demo", nil, args...)
	waitDone(t, ids, a, b)
	if dups := readLedger(t, a, b).check(t, ids); dups != 0 {
		t.Fatalf("%d re-runs in complete mode", dups)
	}
	// The probe listener serves /metrics too.
	doneByB := len(b.logMatches(func(l logLine) bool { return l.msg() == "demo-worker: job done" }))
	want := fmt.Sprintf("lameduck_demo_jobs_done_total %d\n", doneByB)
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(20 * time.Millisecond) {
		m := b.get("/metrics") // the count follows the log line once the ack is confirmed
		if m.code == 200 && strings.Contains(m.raw, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics = %d, want %q:\n%s", m.code, want, m.raw)
		}
	}
	b.stopCleanly(t, "the process")
}

// A job longer than the ack wait is kept by in-progress acks: a second
// loop of the same consumer, idle and fetching, never gets it while it runs.
//
// The server runs in this (race-instrumented) test process, so its
// scheduling is the test's: with a 4s ack wait, an in-progress ack comes
// every 1.3s and only a stall of well over 2s could let the ack wait lapse;
// a job of 8s outlives the ack wait by 4s, so without the acks the
// redelivery to an idle loop would come well inside the job.
func TestE2EWorkerLongJobKeptByInProgressAcks(t *testing.T) {
	url := privateJetStream(t)
	q := uniqueQueue(t, url)
	p := startWorker(t, url, q, nil, "--loops", "3", "--ack-wait", "4s")
	ids := enqueue(t, q, 2, 8*time.Second, "--nats", url)
	waitDone(t, ids, p)
	if dups := readLedger(t, p).check(t, ids); dups != 0 {
		t.Fatalf("%d re-runs", dups)
	}
	p.stopCleanly(t, "the process")
}

// At the drain bound the job in flight is cancelled, named with its age and
// handed back; the next worker runs it from the start. On every queue.
func TestE2EWorkerDrainBoundHandsTheJobBack(t *testing.T) {
	for _, qs := range testQueues {
		t.Run(qs.name, func(t *testing.T) {
			tq := qs.open(t)
			a := tq.start(t, map[string]string{"LAMEDUCK_DRAIN_TIMEOUT": "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN": "10s"})
			ids := tq.enqueue(t, 1, 4*time.Second)
			a.waitLog(`"job started"`, jobsTimeout, func(l logLine) bool { return l.msg() == "demo-worker: job started" })
			a.signal(syscall.SIGTERM)
			a.waitDraining(startTimeout) // the signal is seen when the process gets to it
			cut := a.waitLog(`"drain bound"`, startTimeout, msgContains("lameduck: worker: drain bound 1s reached: cancelling job "+ids[0]+" of loop jobs (age "))
			if age, err := time.ParseDuration(cut.rec["age"].(string)); err != nil || age < time.Second {
				t.Fatalf("cut line %s: want the job's age, at least the 1s bound", cut.raw)
			}
			if code, _ := a.waitExit(startTimeout); code != 1 {
				t.Fatalf("exit %d; want 1: a job was cut at the drain bound", code)
			}
			lg := readLedger(t, a)
			if rs := lg.runs[ids[0]]; len(rs) != 1 || rs[0].outcome != "stopped" || len(lg.handedBk[ids[0]]) != 1 ||
				!strings.Contains(lg.handedBk[ids[0]][0], "cancelled at the drain bound") {
				t.Fatalf("the job was not stopped and handed back: %+v %q", rs, lg.handedBk[ids[0]])
			}
			b := tq.start(t, nil)
			waitDone(t, ids, a, b)
			if dups := readLedger(t, a, b).check(t, ids); dups != 1 {
				t.Fatalf("%d re-runs; want the one handed back at the bound", dups)
			}
			b.stopCleanly(t, "the process")
			tq.wantEmpty(t)
		})
	}
}

// The README's "A runner in one minute", run as written (with a free probe
// port, embedded-server port and store instead of the fixed ones), so it
// cannot drift from what the command does.
func TestReadmeRunnerBlock(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## A runner in one minute\n")
	_, block, ok2 := strings.Cut(sec, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md has no "## A runner in one minute" section with a sh block`)
	}
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) != 3 {
		t.Fatalf("the runner block has %d lines; this test reads three", len(lines))
	}
	cmdOf := func(line string) []string {
		c, _ := splitComment(line)
		f := strings.Fields(c)
		if len(f) < 4 || strings.Join(f[:3], " ") != "go run ./cmd/lameduck" {
			t.Fatalf("README line %q does not run go run ./cmd/lameduck", line)
		}
		return f[3:]
	}
	p := startCmd(t, nil, append(cmdOf(lines[0]), "--log-format", "json", "--probe-addr", "127.0.0.1:0", "--store", t.TempDir(),
		"--embedded-addr", anyPortAddr)...)
	p.listening()
	enq := exec.Command(lameduckBin, append(cmdOf(lines[1]), "--nats", embeddedURL(t, p))...)
	enq.Env = childEnv(nil)
	if out, err := enq.CombinedOutput(); err != nil || !strings.Contains(string(out), "enqueued 100 job(s) of 200ms") {
		t.Fatalf("%v: %v\n%s", enq.Args, err, out)
	}
	p.waitLog(`"job started"`, jobsTimeout, func(l logLine) bool { return l.msg() == "demo-worker: job started" })
	third, comment := splitComment(lines[2])
	if !strings.Contains(comment, "200 ok twice") {
		t.Fatalf("the third line's comment changed: %q", comment)
	}
	for _, c := range strings.Split(third, ";") {
		switch c = strings.TrimSpace(c); {
		case strings.HasPrefix(c, "curl -s localhost:9090/"):
			p.want(strings.TrimPrefix(c, "curl -s localhost:9090"), 200, "ok")
		case c == `kill -TERM $(pgrep -n -x -u "$(id -u)" lameduck)`:
			p.signal(syscall.SIGTERM)
		default:
			t.Fatalf("the third line runs %q, which this test does not know", c)
		}
	}
	// Until the drain ends /readyz says draining (the job in flight is short,
	// so the process may be gone before a probe: then the log tells).
	for deadline := time.Now().Add(startTimeout); time.Now().Before(deadline); time.Sleep(pollEvery) {
		r, err := p.do(context.Background(), p.client, "/readyz")
		if err != nil || r.status() == "draining" {
			break
		}
		if r.status() != "ok" {
			t.Fatalf("GET /readyz = %s after the signal", r)
		}
	}
	sig := p.waitLog(`"draining"`, startTimeout, msgContains("lameduck: draining"))
	if code, _ := p.waitExit(startTimeout); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// No new job after the signal, and "the job in flight finishes": every
	// job started was done, none stopped.
	// (A fetch that returned in the very instant of the signal may have
	// logged its start a hair after the draining line: one at most.)
	if late := p.logMatches(func(l logLine) bool {
		return l.msg() == "demo-worker: job started" && l.at(t).After(sig.at(t))
	}); len(late) > 1 {
		t.Fatalf("%d jobs started after the signal", len(late))
	}
	for id, rs := range readLedger(t, p).runs {
		if len(rs) != 1 || rs[0].outcome != "done" {
			t.Fatalf("job %s: %+v; want done once", id, rs)
		}
	}
}

// With the pod's grace period known (8s), the runner's drain bound is what
// it leaves after the teardown and the margin (4s + 2s + 2s), not 8h: the
// job in flight is cancelled at 4s, handed back at once (a second runner
// starts it long before the 60s ack wait would have redelivered it), named
// with its age, and the process exits 1 before the 8s SIGKILL.
func TestE2EWorkerDrainBoundFitsTheGrace(t *testing.T) {
	url := privateJetStream(t)
	q := uniqueQueue(t, url)
	a := startWorker(t, url, q, map[string]string{"LAMEDUCK_ENV": "kubernetes", "LAMEDUCK_TERMINATION_GRACE": "8s"}, "--ack-wait", "60s")
	a.waitLog(`the budget line`, startTimeout, msgContains(
		"shutdown budget runner drain bound 4s + teardown 2s = 6s ≤ terminationGracePeriodSeconds 8s (margin 2s)"))
	ids := enqueue(t, q, 1, time.Hour, "--nats", url)
	a.waitLog(`"job started"`, jobsTimeout, func(l logLine) bool { return l.msg() == "demo-worker: job started" })
	sent := a.signal(syscall.SIGTERM)
	cut := a.waitLog(`"drain bound"`, startTimeout, msgContains("lameduck: worker: drain bound 4s reached: cancelling job "+ids[0]+" of loop jobs (age "))
	if age, err := time.ParseDuration(cut.rec["age"].(string)); err != nil || age < 4*time.Second {
		t.Fatalf("cut line %s: want the job's age, at least the 4s bound", cut.raw)
	}
	code, exited := a.waitExit(startTimeout)
	if code != 1 {
		t.Fatalf("exit %d; want 1: the job was cut at the drain bound", code)
	}
	if took := exited.Sub(sent); took >= 8*time.Second {
		t.Fatalf("exited %s after SIGTERM: not before the 8s grace period's SIGKILL", took.Round(time.Millisecond))
	}
	a.waitLog(`"exiting non-zero"`, startTimeout, msgContains("job(s) cut at the drain bound 4s and handed back"))
	lg := readLedger(t, a)
	if rs := lg.runs[ids[0]]; len(rs) != 1 || rs[0].outcome != "stopped" || len(lg.handedBk[ids[0]]) != 1 ||
		!strings.Contains(lg.handedBk[ids[0]][0], "cancelled at the drain bound") {
		t.Fatalf("the job was not stopped and handed back: %+v %q", rs, lg.handedBk[ids[0]])
	}
	b := startWorker(t, url, q, map[string]string{"LAMEDUCK_DRAIN_MODE": "interrupt"}, "--ack-wait", "60s")
	again := b.waitLog(`"job started"`, 30*time.Second, func(l logLine) bool { return l.msg() == "demo-worker: job started" })
	if after := again.at(t).Sub(exited); after >= 30*time.Second {
		t.Fatalf("the job started again %s after the first runner exited: left to its 60s ack wait", after)
	}
	b.stopCleanly(t, "the second runner")
}

// Every hand-back of the runner's leaves the job deliverable, whatever the
// consumer's MaxDeliver: a job interrupted at its first delivery is NAKed
// (delivery 1 of 2), and at its last one it is re-published and the
// original acknowledged, so a third runner still gets it and does it. No
// max-deliveries advisory (the dead-letter path) is ever published for
// it. A runner started without --ack-wait and --max-deliver keeps the
// consumer's (30s, 2) instead of resetting them, and logs the in-progress
// interval derived from the ack wait.
func TestE2EWorkerHandBacksLeaveTheJobDeliverable(t *testing.T) {
	url := privateJetStream(t)
	q := uniqueQueue(t, url)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	advisories, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>")
	if err != nil {
		t.Fatal(err)
	}
	interrupt := map[string]string{"LAMEDUCK_DRAIN_MODE": "interrupt"}
	a := startWorkerKeeping(t, url, q, interrupt, "--ack-wait", "30s", "--max-deliver", "2")
	ids := enqueue(t, q, 1, 3*time.Second, "--nats", url)
	var procs []*proc
	for i, p := range []*proc{a, nil} {
		if p == nil {
			p = startWorkerKeeping(t, url, q, interrupt)
			l := p.waitLog(`"consuming"`, startTimeout, msgContains("demo-worker: consuming"))
			if l.rec["ack_wait"] != "30s" || l.rec["max_deliver"] != float64(2) || l.rec["in_progress_every"] != "10s" {
				t.Fatalf("consuming line %s: want the consumer's ack_wait 30s, max_deliver 2, in_progress_every 10s", l.raw)
			}
		}
		procs = append(procs, p)
		p.waitLog(`"job started"`, jobsTimeout, func(l logLine) bool { return l.msg() == "demo-worker: job started" })
		p.signal(syscall.SIGTERM)
		if code, _ := p.waitExit(startTimeout); code != 0 {
			t.Fatalf("runner %d: exit %d", i, code)
		}
		back := p.waitLog(`"job handed back"`, startTimeout, msgContains("lameduck: worker: job handed back: "))
		if back.rec["job"] != ids[0] {
			t.Fatalf("runner %d handed back %s", i, back.raw)
		}
	}
	c := startWorkerKeeping(t, url, q, nil)
	procs = append(procs, c)
	waitDone(t, ids, procs...)
	if dups := readLedger(t, procs...).check(t, ids); dups != 2 {
		t.Fatalf("%d re-runs; want the two interrupted ones", dups)
	}
	if m, err := advisories.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("a max-deliveries advisory was published: %s", m.Data)
	}
	c.stopCleanly(t, "the process")
}

// A consume loop whose server stopped answering fetches in name only: its
// fetches end with neither a job nor the server's end of the request nor a
// heartbeat. Liveness catches it: an idle loop whose fetches end on the
// server's idle heartbeats and expiries stays 200 past its threshold, and
// once the proxy between it and the real JetStream stops forwarding, it
// turns 503 stalled, counting its silent fetches.
func TestE2EWorkerSilentServerFailsLiveness(t *testing.T) {
	url := privateJetStream(t)
	q := uniqueQueue(t, url)
	px := testsupport.NewAnswerRelay(t, strings.TrimPrefix(url, "nats://"))
	p := startWorker(t, "nats://"+px.Addr(), q, map[string]string{"LAMEDUCK_FETCH_WAIT": "300ms"},
		"--liveness-floor", "1s", "--epoch-source", "static")
	// 20 × 300ms: the threshold is 6s. Idle, with the server answering, for
	// longer than that: alive.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		p.want("/healthz", 200, "ok")
	}
	px.Mute(true) // the server's answers are dropped from now on, the connection kept open
	stopped := time.Now()
	var r reply
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r = p.get("/healthz"); r.code == 503 {
			break
		}
		if r.code != 200 || time.Now().After(deadline) {
			t.Fatalf("GET /healthz = %s %s after the server went silent; want 200 until 503 stalled", r, time.Since(stopped).Round(time.Second))
		}
	}
	if r.status() != "stalled" || r.body["loop"] != "jobs" || r.body["threshold"] != "6s" {
		t.Fatalf("GET /healthz = %s; want 503 stalled naming loop jobs", r)
	}
	if n, _ := r.body["silent_fetches"].(float64); n < 1 {
		t.Fatalf("GET /healthz = %s; want silent_fetches", r)
	}
	if took := time.Since(stopped); took < 5*time.Second { // the last cycle may end a fetch wait before the stop
		t.Fatalf("stalled %s after the server went silent: before the 6s threshold", took)
	}
	p.waitLog(`"no reply"`, startTimeout, msgContains("lameduck: worker: fetch got no reply from the queue server"))
	p.signal(syscall.SIGTERM)
	p.waitExit(startTimeout)
}
