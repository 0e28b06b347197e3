package ldpgx_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// A job enqueued is claimed with its key, payload and first attempt; it
// is running under a lease while it is held, and an Ack deletes it.
func TestClaimAndAck(t *testing.T) {
	d := newDB(t)
	src := d.source(t, nil, ldpgx.SourceConfig{})
	fetchNone(t, src, 0, "the table is empty")
	d.enqueue(t, ldpgx.EnqueueJob{Key: "job-1", Payload: []byte(`{"n":1}`)}, ldpgx.EnqueueJob{})
	j := fetch(t, src, time.Second)
	if j.ID() != "job-1" || j.Key() != "job-1" || string(j.Payload()) != `{"n":1}` || j.Delivery() != 1 ||
		j.MaxAttempts() != ldpgx.DefaultMaxAttempts || j.LastAttempt() {
		t.Fatalf("job %q key %q payload %q delivery %d of %d; want job-1's first delivery of %d",
			j.ID(), j.Key(), j.Payload(), j.Delivery(), j.MaxAttempts(), ldpgx.DefaultMaxAttempts)
	}
	r := d.mustRow(t, "job-1")
	if r.state != "running" || !r.claimed || r.attempts != 1 || r.leaseUntil == nil || !r.leaseUntil.After(r.now) {
		t.Fatalf("row while held: %+v; want running, claimed, attempt 1, under a lease that has not ended", r)
	}
	// The second job has no key: it is named by its row.
	j2 := fetch(t, src, time.Second)
	if !strings.HasPrefix(j2.ID(), "row-") || j2.Key() != "" || len(j2.Payload()) != 0 {
		t.Fatalf("keyless job named %q, key %q, payload %q; want row-<id>, no key, no payload", j2.ID(), j2.Key(), j2.Payload())
	}
	for _, j := range []*ldpgx.Job{j, j2} {
		if err := j.Ack(testsupport.Context(t, long)); err != nil {
			t.Fatal(err)
		}
	}
	if pending, dead := d.counts(t); pending != 0 || dead != 0 {
		t.Fatalf("after the acks: %d pending, %d dead; want none", pending, dead)
	}
	fetchNone(t, src, 0, "both jobs were acknowledged")
}

// A job's own failure counts: each hand-back keeps the attempt counted at
// the claim, and the hand-back of the last attempt moves the job to the
// dead state, where no Fetch finds it.
func TestFailuresCountToDead(t *testing.T) {
	d := newDB(t)
	logs := new(testsupport.LogBuffer)
	src := d.source(t, nil, ldpgx.SourceConfig{Logger: slogTo(logs)})
	d.enqueue(t, ldpgx.EnqueueJob{Key: "fails", MaxAttempts: 3})
	for attempt := 1; attempt <= 3; attempt++ {
		j := fetch(t, src, 10*time.Second)
		if j.Delivery() != attempt || j.LastAttempt() != (attempt == 3) {
			t.Fatalf("delivery %d, last %v; want delivery %d", j.Delivery(), j.LastAttempt(), attempt)
		}
		if err := j.HandBack(context.Background(), 0); err != nil { // no cause: the job's failure
			t.Fatal(err)
		}
		r := d.mustRow(t, "fails")
		want := "ready"
		if attempt == 3 {
			want = "dead"
		}
		if r.state != want || r.attempts != attempt || r.claimed || r.leaseUntil != nil {
			t.Fatalf("after failure %d: %+v; want %s, attempts %d, unclaimed", attempt, r, want, attempt)
		}
	}
	fetchNone(t, src, 200*time.Millisecond, "the job is dead")
	if pending, dead := d.counts(t); pending != 0 || dead != 1 {
		t.Fatalf("%d pending, %d dead; want the one job dead", pending, dead)
	}
	waitLog(t, logs, "job fails failed its last attempt (3 of max_attempts 3): moved to the dead state")
}

// A failure handed back with a delay is due no sooner than the delay,
// on PostgreSQL's clock: a job delayed an hour is not claimed now, and one
// delayed 500ms is claimed again only once its run_at has passed.
func TestHandBackDelay(t *testing.T) {
	d := newDB(t)
	src := d.source(t, nil, ldpgx.SourceConfig{})
	d.enqueue(t, ldpgx.EnqueueJob{Key: "later"}, ldpgx.EnqueueJob{Key: "soon"})
	later, soon := fetch(t, src, time.Second), fetch(t, src, time.Second)
	if err := later.HandBack(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	r := d.mustRow(t, "later")
	if r.state != "ready" || r.runAt.Sub(r.now) < 59*time.Minute {
		t.Fatalf("handed back with 1h: %+v; want ready, due in about an hour", r)
	}
	if err := soon.HandBack(context.Background(), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	due := *d.mustRow(t, "soon").runAt
	again := fetch(t, src, long)
	if again.Key() != "soon" || again.Delivery() != 2 {
		t.Fatalf("claimed %q delivery %d; want soon's second delivery", again.Key(), again.Delivery())
	}
	// The claim set lease_until = now() + lease at the claim.
	claimedAt := again.LeaseUntil().Add(-src.Lease())
	if claimedAt.Before(due) {
		t.Fatalf("claimed at %s, before its run_at %s", claimedAt, due)
	}
	fetchNone(t, src, 0, "the other job is due in an hour")
	if err := again.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// claimedWithAShortLease enqueues a job under key on a fresh table and
// claims it from a Source whose lease is 1s; it returns the table, the
// job, and what the Source logged.
func claimedWithAShortLease(t *testing.T, key string) (*db, *ldpgx.Job, *testsupport.LogBuffer) {
	t.Helper()
	d := newDB(t)
	logs := new(testsupport.LogBuffer)
	src := d.source(t, nil, ldpgx.SourceConfig{Lease: time.Second, Logger: slogTo(logs)})
	d.enqueue(t, ldpgx.EnqueueJob{Key: key})
	return d, fetch(t, src, time.Second), logs
}

// An Ack or a HandBack whose claim was taken (another token in the row)
// changes nothing and says so, wrapping ErrClaimLost; the renewal that
// finds the claim gone logs that the job was taken away.
func TestAckWithAStolenClaim(t *testing.T) {
	d, j, logs := claimedWithAShortLease(t, "stolen")
	// As a runner that claimed it after this one's lease ended would.
	if n := d.exec(t, `UPDATE %s SET claim = gen_random_uuid(), attempts = attempts + 1 WHERE key = 'stolen'`); n != 1 {
		t.Fatalf("stole %d rows", n)
	}
	waitLog(t, logs, "job stolen was taken away: renewing its lease found its claim gone (another runner claimed it")
	err := j.Ack(context.Background())
	if !errors.Is(err, ldpgx.ErrClaimLost) || !strings.Contains(err.Error(), "another runner claimed it") || !strings.HasPrefix(err.Error(), "lameduck: ") {
		t.Fatalf("Ack of a stolen claim: %v; want ErrClaimLost, saying another runner holds it", err)
	}
	if r := d.mustRow(t, "stolen"); r.state != "running" || r.attempts != 2 {
		t.Fatalf("the Ack changed the row: %+v", r)
	}
	err = j.HandBack(context.Background(), 0)
	if !errors.Is(err, ldpgx.ErrClaimLost) {
		t.Fatalf("HandBack of a stolen claim: %v; want ErrClaimLost", err)
	}
	// The row gone: the error says so.
	d.exec(t, `DELETE FROM %s`)
	if err := j.Ack(context.Background()); !errors.Is(err, ldpgx.ErrClaimLost) || !strings.Contains(err.Error(), "its row is gone") {
		t.Fatalf("Ack of a deleted row: %v; want ErrClaimLost, saying the row is gone", err)
	}
}

// A job in flight keeps its lease past the lease's length, renewed every
// third of it: long after the first lease would have ended, the row is
// still running on this claim (the Ack, which needs the claim's token,
// succeeds) and its lease_until has moved past the first one.
func TestLeaseRenewedPastTheLease(t *testing.T) {
	d, j, logs := claimedWithAShortLease(t, "long")
	first := *d.mustRow(t, "long").leaseUntil
	// Three leases' worth of PostgreSQL's time.
	eventually(t, "three leases to pass with the lease renewed", func() bool {
		r := d.mustRow(t, "long")
		return r.now.After(first.Add(2*time.Second)) && r.leaseUntil.After(first.Add(2*time.Second))
	})
	if r := d.mustRow(t, "long"); r.state != "running" || r.attempts != 1 {
		t.Fatalf("after three leases: %+v; want running, attempt 1", r)
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatalf("Ack after three leases: %v; the log:\n%s", err, logs)
	}
	if strings.Contains(logs.String(), "taken away") || strings.Contains(logs.String(), "failed") {
		t.Fatalf("the renewals failed or lost the claim:\n%s", logs)
	}
}

// Enqueue in the producer's transaction: nothing is claimed before the
// commit, nothing at all after a rollback; a Fetch already waiting (its
// Poll an hour, so only the notification can wake it) is woken by the
// commit.
func TestEnqueueInTheProducersTransaction(t *testing.T) {
	d := newDB(t)
	src := d.source(t, nil, ldpgx.SourceConfig{Poll: time.Hour})
	ctx := testsupport.Context(t, long)

	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ldpgx.Enqueue(ctx, tx, d.table, ldpgx.EnqueueJob{Key: "rolled-back"}); err != nil {
		t.Fatal(err)
	}
	fetchNone(t, src, 0, "the transaction has not committed")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	fetchNone(t, src, 0, "the transaction rolled back")

	// A runner waiting in Fetch: it says it is consuming (readiness turns
	// 200) once it listens and its first claim found nothing. After the job
	// the loop is back in a Fetch that would wait an hour; the drain ends
	// it (worker.Stopping).
	w := newWorker(t, worker.Config{}, nil)
	got := make(chan string, 1)
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Hour,
		Handle: func(_ context.Context, j worker.Job) error { got <- j.ID(); return nil }}); err != nil {
		t.Fatal(err)
	}
	wait := run(t, w)
	testsupport.Await(t, w.Lifecycle().Events().StartupDone)
	tx, err = d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ldpgx.Enqueue(ctx, tx, d.table, ldpgx.EnqueueJob{Key: "committed"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if id := testsupport.Recv(t, got, "the committed job"); id != "committed" {
		t.Fatalf("handled %q; want committed", id)
	}
	w.Lifecycle().BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ack", func() bool { p, _ := d.counts(t); return p == 0 })
}

// Between two claims a Fetch holds no request PostgreSQL could still
// answer, so it ends when the runner stops asking (worker.Stopping): a
// drain does not wait out an idle fetch. With a FetchWait and a teardown
// budget of an hour each, Run returns only because the wait ended at the
// drain; the hang guard of testsupport.Recv fails the test otherwise.
func TestTheDrainEndsAnIdleFetch(t *testing.T) {
	d := newDB(t)
	src := d.source(t, nil, ldpgx.SourceConfig{Poll: time.Hour})
	var logs testsupport.LogBuffer
	logs.LogOnFailure(t)
	w := newWorker(t, worker.Config{Lifecycle: lameduck.Config{ShutdownTeardown: time.Hour}}, &logs)
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Hour,
		Handle: func(context.Context, worker.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	wait := run(t, w)
	testsupport.Await(t, w.Lifecycle().Events().StartupDone) // the fetch listens and waits
	w.Lifecycle().BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The runner's own hand-back (here an interrupt at the drain) at the
// job's last attempt refunds the attempt and never dead-letters it: the
// job is ready again, as before its claim, and its next delivery is a
// first.
func TestRunnersHandBackAtTheLastAttempt(t *testing.T) {
	d := newDB(t)
	src := d.source(t, nil, ldpgx.SourceConfig{})
	d.enqueue(t, ldpgx.EnqueueJob{Key: "interrupted", MaxAttempts: 1})
	w := newWorker(t, worker.Config{Lifecycle: lameduck.Config{DrainMode: worker.DrainInterrupt}}, nil)
	started := make(chan *ldpgx.Job, 1)
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: time.Second,
		Handle: func(ctx context.Context, j worker.Job) error {
			started <- j.(*ldpgx.Job)
			<-ctx.Done()
			return context.Cause(ctx)
		}}); err != nil {
		t.Fatal(err)
	}
	wait := run(t, w)
	j := testsupport.Recv(t, started, "the job's start")
	if !j.LastAttempt() {
		t.Fatalf("delivery %d of %d is not the last", j.Delivery(), j.MaxAttempts())
	}
	w.Lifecycle().BeginShutdown("test")
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r := d.mustRow(t, "interrupted"); r.state != "ready" || r.attempts != 0 || r.claimed || r.runAt.After(r.now) {
		t.Fatalf("after the runner's hand-back: %+v; want ready now, attempts 0 as before the claim", r)
	}
	again := fetch(t, src, time.Second)
	if again.Delivery() != 1 || !again.LastAttempt() {
		t.Fatalf("redelivered as delivery %d; want 1 (the runner's hand-back is not counted)", again.Delivery())
	}
	if err := again.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Claims across loops and runners never hand a job to two at once: two
// runners of four loops each on one table, every job handled once and
// never while another loop holds it, the table empty at the end.
func TestClaimContentionAcrossLoops(t *testing.T) {
	d := newDB(t)
	const jobs, runners, loops = 300, 2, 4
	batch := make([]ldpgx.EnqueueJob, jobs)
	for i := range batch {
		batch[i] = ldpgx.EnqueueJob{Key: "job-" + itoa(i)}
	}
	d.enqueue(t, batch...)
	var (
		mu      sync.Mutex
		holding = map[string]string{} // job → the loop running it
		handled = map[string]int{}
		twice   []string
		all     = make(chan struct{})
	)
	var waits []func() error
	var ws []*worker.Worker
	for r := range runners {
		src := d.source(t, newPool(t, d.dsn), ldpgx.SourceConfig{})
		w := newWorker(t, worker.Config{}, nil)
		for l := range loops {
			name := "r" + itoa(r) + "-l" + itoa(l)
			if err := w.AddLoop(worker.Loop{Name: "jobs-" + itoa(l), Source: src, FetchWait: time.Second,
				Handle: func(_ context.Context, j worker.Job) error {
					mu.Lock()
					if other, ok := holding[j.ID()]; ok {
						twice = append(twice, j.ID()+" in "+name+" while in "+other)
					}
					holding[j.ID()] = name
					mu.Unlock()
					time.Sleep(time.Millisecond) // hold it a moment, so holdings overlap
					mu.Lock()
					delete(holding, j.ID())
					handled[j.ID()]++
					if len(handled) == jobs {
						select {
						case <-all:
						default:
							close(all)
						}
					}
					mu.Unlock()
					return nil
				}}); err != nil {
				t.Fatal(err)
			}
		}
		ws = append(ws, w)
		waits = append(waits, run(t, w))
	}
	select {
	case <-all:
	case <-time.After(long):
		t.Fatalf("waited %s for %d jobs", long, jobs)
	}
	for _, w := range ws {
		w.Lifecycle().BeginShutdown("test")
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(twice) > 0 {
		t.Fatalf("jobs held twice at once: %v", twice)
	}
	for id, n := range handled {
		if n != 1 {
			t.Errorf("job %s handled %d times", id, n)
		}
	}
	if pending, dead := d.counts(t); pending != 0 || dead != 0 {
		t.Fatalf("%d pending, %d dead after every job was handled; want none", pending, dead)
	}
}
