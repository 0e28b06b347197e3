package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/worker"
)

// kind is how a scenario disturbs the runners.
type kind int

const (
	kindDrain   kind = iota // drains one runner at a time, frozen with jobs in flight and fetches under way
	kindBound               // the same, its held handlers outlasting the drain bound
	kindEpochs              // moves the fleet to a newer epoch, the old runners frozen
	kindTrickle             // publishes while the runners wait in their fetches, drains among them
	kindBroken              // cuts every connection, then replaces the runners
	kindRestart             // restarts the queue server, then replaces the runners
)

// scenario is one subtest of Run.
type scenario struct {
	name        string
	kind        kind
	mode        string // the runners' drain mode
	maxDeliver  int    // the queue's delivery limit; 0: unlimited
	jobs        func(o Options) int
	events      func(o Options) int // drains, epoch moves, breaks or restarts
	failOnce    float64             // the fraction of jobs that fail (half error, half panic) on their first attempt
	always      int                 // jobs whose handler always fails
	atLeastOnce bool                // connections break: duplicates are reported, not failures
	restart     bool                // needs Harness.Restart
}

func allJobs(o Options) int    { return o.Jobs }
func fifthJobs(o Options) int  { return max(o.Jobs/5, 10) }
func tenthJobs(o Options) int  { return max(o.Jobs/10, 10) }
func fewJobs(o Options) int    { return min(max(o.Jobs/10, 10), 100) } // published one at a time, a fetch wait apart at most
func allDrains(o Options) int  { return o.Drains }
func fewDrains(o Options) int  { return min(o.Drains, 3) }
func someDrains(o Options) int { return min(o.Drains, 4) }
func noEvents(Options) int     { return 0 }
func restarts(o Options) int {
	if o.Short {
		return 1
	}
	return 2
}

// scenarios are Run's subtests, in order.
var scenarios = []scenario{
	{name: "backlog-complete", kind: kindDrain, mode: worker.DrainComplete, jobs: allJobs, events: allDrains},
	{name: "backlog-interrupt", kind: kindDrain, mode: worker.DrainInterrupt, jobs: allJobs, events: allDrains},
	{name: "last-delivery-complete", kind: kindDrain, mode: worker.DrainComplete, maxDeliver: 1, jobs: fifthJobs, events: allDrains},
	{name: "last-delivery-interrupt", kind: kindDrain, mode: worker.DrainInterrupt, maxDeliver: 1, jobs: fifthJobs, events: allDrains},
	{name: "failures", kind: kindDrain, mode: worker.DrainInterrupt, jobs: fifthJobs, events: fewDrains, failOnce: 0.2},
	{name: "failures-limit", kind: kindDrain, mode: worker.DrainComplete, maxDeliver: 2, jobs: fifthJobs, events: noEvents, failOnce: 0.2, always: 5},
	{name: "drain-bound", kind: kindBound, mode: worker.DrainComplete, jobs: tenthJobs, events: someDrains},
	{name: "epochs", kind: kindEpochs, mode: worker.DrainComplete, jobs: fifthJobs, events: someDrains},
	{name: "trickle", kind: kindTrickle, mode: worker.DrainComplete, maxDeliver: 1, jobs: fewJobs, events: someDrains},
	{name: "broken", kind: kindBroken, mode: worker.DrainComplete, jobs: fifthJobs, events: fewDrains, atLeastOnce: true},
	{name: "restart", kind: kindRestart, mode: worker.DrainComplete, jobs: fifthJobs, events: restarts, atLeastOnce: true, restart: true},
}

// scene is one scenario being played.
type scene struct {
	sc     scenario
	o      Options
	h      Harness
	books  *books
	relay  *Relay
	logs   *ring
	epochs *epochSwitch

	rngMu sync.Mutex
	rng   *rand.Rand // guarded by rngMu

	distinct atomic.Int64 // ids completed at least once
	budget   atomic.Int64 // fetches the runners may still make, net of the jobs that went back (see recSource)
	fetching atomic.Int64 // Fetch calls asking the queue now

	budgetMu sync.Mutex
	budgetCh chan struct{} // guarded by budgetMu: closed (and replaced) when a budget grows

	// The controller's own (Run's goroutine only):
	expected int       // ids that must complete: every one but the always-failing
	segment  int       // the budget each event opens
	segments int       // segments still to open; the last opens without bound
	nextN    int       // runners made so far
	alive    []*runner // the runners not yet drained
	drains   int       // runners drained

	mu       sync.Mutex
	failures []string // guarded by mu
	notes    []string // guarded by mu
}

// fail records a failure of the scenario.
func (sc *scene) fail(format string, args ...any) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.failures = append(sc.failures, fmt.Sprintf(format, args...))
}

// note records something the verdict reports without failing.
func (sc *scene) note(format string, args ...any) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	record(&sc.notes, format, args...)
}

// ackFailed records an Ack's error: a failure where connections stay up.
func (sc *scene) ackFailed(id string, err error) {
	if sc.sc.atLeastOnce {
		return // counted in the books; the queue redelivers the job
	}
	sc.books.sourceBroke("Ack of job %s failed with the connection up: %v", id, err)
}

// handBackFailed records a HandBack's error: a failure where connections
// stay up.
func (sc *scene) handBackFailed(id string, cause, err error) {
	if sc.sc.atLeastOnce {
		return
	}
	sc.books.sourceBroke("HandBack of job %s (cause %s) failed with the connection up: %v", id, causeName(cause), err)
}

// jobDuration is a handler's run: 1ms to 5ms.
func (sc *scene) jobDuration() time.Duration {
	sc.rngMu.Lock()
	defer sc.rngMu.Unlock()
	return time.Millisecond + time.Duration(sc.rng.Int64N(int64(4*time.Millisecond)))
}

// randN returns a random duration in [0, d).
func (sc *scene) randN(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	sc.rngMu.Lock()
	defer sc.rngMu.Unlock()
	return time.Duration(sc.rng.Int64N(int64(d)))
}

// epochSwitch is the fleet's EpochSource in the suite: the newest epoch is
// what the scenario sets.
type epochSwitch struct{ newest atomic.Uint64 }

// Newest returns max(the epoch set, mine).
func (e *epochSwitch) Newest(_ context.Context, mine uint64) (uint64, error) {
	return max(e.newest.Load(), mine), nil
}

// verdict is one scenario's result: a row of the table, and why it failed.
type verdict struct {
	name         string
	published    int
	completed    int // ids completed at least once
	duplicates   int // completions beyond each id's first
	lost         int // ids neither completed, nor pending, nor dead-lettered
	pending      int // at the queue after every runner stopped
	deadLettered int
	handBacks    int
	causes       string // hand-backs by cause
	drains       int
	took         time.Duration
	failures     []string
	notes        []string
	logs         string // the runners' last log lines, when it failed
	skipped      string // why it did not run
}

// failed reports whether the verdict fails the scenario.
func (v verdict) failed() bool { return len(v.failures) > 0 }

// play runs one scenario against h and returns its verdict. It never
// fails a test itself: Run does, from the verdict.
func play(ctx context.Context, h Harness, o Options, s scenario) (v verdict) {
	began := time.Now()
	sc := &scene{sc: s, o: o, h: h, logs: newRing(400), epochs: &epochSwitch{}}
	sc.rng = rand.New(rand.NewPCG(o.Seed, uint64(len(s.name))*0x9e3779b97f4a7c15))
	v.name = s.name
	if o.Latency > 0 {
		v.name += fmt.Sprintf(" +%s", o.Latency)
	}
	defer func() { v.took = time.Since(began).Round(10 * time.Millisecond) }()
	if s.restart && h.Restart == nil {
		v.skipped = "Harness.Restart is nil"
		return v
	}

	n := s.jobs(o)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", s.name, i+1)
	}
	plans := sc.plans(ids)
	sc.books = newBooks(ids, plans)
	sc.expected = n - s.always
	v.published = n

	if err := sc.call(ctx, fmt.Sprintf("Harness.Reset(maxDeliver %d)", s.maxDeliver), 60*time.Second, func(ctx context.Context) error {
		return h.Reset(ctx, s.maxDeliver)
	}); err != nil {
		v.failures = append(v.failures, err.Error())
		return v
	}
	if s.kind != kindTrickle {
		if err := sc.call(ctx, fmt.Sprintf("Harness.Publish of %d jobs", n), 60*time.Second, func(ctx context.Context) error {
			return h.Publish(ctx, ids)
		}); err != nil {
			v.failures = append(v.failures, err.Error())
			return v
		}
	}
	want := n
	if s.kind == kindTrickle {
		want = 0
	}
	if err := sc.awaitCount(ctx, want); err != nil {
		v.failures = append(v.failures, err.Error())
		return v
	}
	relay, err := NewRelay(h.Addr, o.Latency)
	if err != nil {
		v.failures = append(v.failures, err.Error())
		return v
	}
	sc.relay = relay
	defer relay.Close()
	before := goroutines()

	sc.playEvents(ctx, ids)
	sc.awaitAll(ctx)
	sc.stopAll()

	var final Counts
	counted := sc.call(ctx, "Harness.Count after every runner stopped", 20*time.Second, func(ctx context.Context) error {
		var err error
		final, err = h.Count(ctx)
		return err
	})
	if leaks := sc.leaks(before); leaks != "" {
		sc.fail("%s", leaks)
	}
	if err := relay.Close(); err != nil {
		sc.note("closing the relay: %v", err)
	}
	sc.judge(&v, final, counted)
	if v.failed() {
		v.logs = sc.logs.String()
	}
	return v
}

// plans picks the jobs that fail: a fraction once (half by an error, half
// by a panic), a few always.
func (sc *scene) plans(ids []string) map[string]plan {
	plans := make(map[string]plan, len(ids))
	perm := sc.rng.Perm(len(ids))
	k := 0
	for range sc.sc.always {
		plans[ids[perm[k]]] = planAlways
		k++
	}
	once := int(sc.sc.failOnce * float64(len(ids)))
	for i := range once {
		if k >= len(ids) {
			break
		}
		p := planErrorOnce
		if i%2 == 1 {
			p = planPanicOnce
		}
		plans[ids[perm[k]]] = p
		k++
	}
	return plans
}

// awaitCount waits up to 10s for the queue to count want jobs pending and
// none dead-lettered, as Reset and Publish left it.
func (sc *scene) awaitCount(ctx context.Context, want int) error {
	deadline := time.Now().Add(10 * time.Second)
	var last Counts
	for {
		err := sc.call(ctx, "Harness.Count after Reset and Publish", 20*time.Second, func(ctx context.Context) error {
			var err error
			last, err = sc.h.Count(ctx)
			return err
		})
		if err != nil {
			return err
		}
		if last.Pending == want && last.DeadLettered == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lameduck: sourcetest: after Reset and the Publish of %d jobs, Harness.Count reads %d pending and %d dead-lettered for 10s; want %d and 0 (check Reset empties the queue and Count reads it)",
				want, last.Pending, last.DeadLettered, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unlimited is a budget that never runs out.
const unlimited = 1 << 40

// budgetChan returns a channel closed when a budget next grows.
func (sc *scene) budgetChan() <-chan struct{} {
	sc.budgetMu.Lock()
	defer sc.budgetMu.Unlock()
	if sc.budgetCh == nil {
		sc.budgetCh = make(chan struct{})
	}
	return sc.budgetCh
}

// budgetMoved wakes the Fetches waiting for a ticket.
func (sc *scene) budgetMoved() {
	sc.budgetMu.Lock()
	defer sc.budgetMu.Unlock()
	if sc.budgetCh != nil {
		close(sc.budgetCh)
		sc.budgetCh = nil
	}
}

// openNext grows the budget by one segment of jobs, or without bound after
// the last event: the runners take the next jobs.
func (sc *scene) openNext() {
	if sc.segments--; sc.segments <= 0 {
		sc.budget.Store(unlimited)
	} else {
		sc.budget.Add(int64(sc.segment))
	}
	sc.budgetMoved()
}

// playEvents starts the runners and disturbs them as the scenario says.
// Where drains are played, the runners are paced by a budget of fetches,
// one segment of the jobs at a time, so that each drain comes while jobs
// are left: the controller waits for a segment to be done, plays the event,
// then opens the next.
func (sc *scene) playEvents(ctx context.Context, ids []string) {
	events := sc.sc.events(sc.o)
	epoch := uint64(0)
	if sc.sc.kind == kindEpochs {
		epoch = 1
		sc.epochs.newest.Store(epoch)
	}
	// A frozen runner takes one job per loop beyond the budget.
	sc.segment = max(1, (sc.expected-events*sc.o.Loops)/(events+1))
	sc.segments = events + 1
	if sc.sc.kind == kindTrickle || events == 0 {
		sc.segments = 0
	}
	sc.openNext()
	var pub sync.WaitGroup
	var published atomic.Int64
	stopPub := make(chan struct{})
	defer func() { close(stopPub); pub.Wait() }()
	for range sc.o.Runners {
		if !sc.start(ctx, epoch) {
			return
		}
	}
	if sc.sc.kind == kindTrickle {
		pub.Go(func() { sc.trickle(ctx, ids, &published, stopPub) })
	}
	for i := range events {
		switch sc.sc.kind {
		case kindTrickle:
			sc.awaitPublished(&published, (i+1)*len(ids)/(events+1))
		case kindBroken, kindRestart:
			sc.awaitSegment()
			sc.openNext()
			sc.waitFor(2*time.Second+4*sc.o.Latency, func() bool { return sc.inflight() > 0 })
		default:
			sc.awaitSegment()
		}
		switch sc.sc.kind {
		case kindDrain, kindBound:
			if len(sc.alive) == 0 {
				return
			}
			sc.drainFrozen(ctx, sc.alive[0], sc.sc.mode == worker.DrainComplete && sc.sc.kind == kindDrain)
		case kindTrickle:
			if len(sc.alive) == 0 {
				return
			}
			r := sc.alive[0]
			sc.begin(r)
			ok := sc.start(ctx, 0)
			sc.stop(r)
			if !ok {
				return
			}
		case kindEpochs:
			epoch++
			if !sc.moveEpoch(ctx, epoch) {
				return
			}
		case kindBroken:
			sc.relay.Break()
			sc.note("event %d: every connection through the relay cut with %d job(s) in flight", i+1, sc.inflight())
			time.Sleep(2 * sc.o.FetchWait) // the Sources see it, and may reconnect
			if !sc.replaceAll(ctx, epoch) {
				return
			}
		case kindRestart:
			n := sc.inflight()
			if err := sc.call(ctx, "Harness.Restart", 60*time.Second, sc.h.Restart); err != nil {
				sc.fail("%v", err)
				return
			}
			sc.note("event %d: the queue server restarted with %d job(s) in flight", i+1, n)
			if !sc.replaceAll(ctx, epoch) {
				return
			}
		}
	}
	if sc.sc.kind == kindTrickle {
		sc.awaitPublished(&published, len(ids))
	}
}

// awaitSegment waits until the budget is spent and its jobs have ended
// (no Fetch asks the queue, no handler runs), every job is done, or
// nothing has moved for a while.
func (sc *scene) awaitSegment() {
	stall := time.Second + 2*sc.o.FetchWait
	last, since := sc.distinct.Load(), time.Now()
	for {
		c := sc.distinct.Load()
		if c >= int64(sc.expected) || (sc.budget.Load() == 0 && sc.fetching.Load() == 0 && sc.inflight() == 0) {
			return
		}
		if c != last {
			last, since = c, time.Now()
		} else if time.Since(since) > stall {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// start starts a runner, recording a failure when it cannot.
func (sc *scene) start(ctx context.Context, epoch uint64) bool {
	if _, err := sc.startRunner(ctx, epoch); err != nil {
		sc.fail("%v", err)
		return false
	}
	return true
}

// drainFrozen drains r with jobs in flight and fetches under way: it
// freezes r until each of its loops holds a job (see runner.freeze),
// begins r's drain, lets the fetches go (their jobs are handed back
// unstarted), lets the handlers go when release is set (mode complete: they
// finish during the drain; otherwise the drain's interrupt or its bound
// cancels them), opens the next segment, starts a fresh runner and waits
// for r to stop.
func (sc *scene) drainFrozen(ctx context.Context, r *runner, release bool) {
	r.freeze()
	sc.waitFor(2*time.Second+4*sc.o.Latency, r.isFrozen)
	sc.begin(r)
	r.thawFetches()
	if release {
		r.thawHandlers()
	}
	sc.openNext()
	sc.start(ctx, r.epoch)
	sc.stop(r)
}

// moveEpoch moves the fleet to epoch: the runners alive are frozen, the
// EpochSource answers epoch, as many runners of that epoch start; once the
// old ones say they are superseded their held fetches go (handed back,
// delayed) and their held handlers finish where they are; then they drain.
func (sc *scene) moveEpoch(ctx context.Context, epoch uint64) bool {
	old := append([]*runner(nil), sc.alive...)
	for _, r := range old {
		r.freeze()
	}
	sc.waitFor(2*time.Second+4*sc.o.Latency, func() bool {
		for _, r := range old {
			if !r.isFrozen() {
				return false
			}
		}
		return true
	})
	sc.epochs.newest.Store(epoch)
	sc.openNext()
	ok := true
	for range sc.o.Runners {
		if ok = sc.start(ctx, epoch); !ok {
			break
		}
	}
	for _, r := range old {
		if !sc.waitFor(10*time.Second, r.superseded) {
			sc.books.workerBroke("runner %d (epoch %d) never said it was superseded within 10s of the fleet moving to epoch %d (EpochPoll %s)", r.n, r.epoch, epoch, epochPoll)
		}
		r.thawFetches()
		r.thawHandlers()
	}
	for _, r := range old {
		if !sc.waitFor(10*time.Second, func() bool { return r.inflight.Load() == 0 }) {
			sc.fail("runner %d, superseded, still ran a job 10s after its handlers were let go", r.n)
		}
	}
	for _, r := range old {
		sc.begin(r)
	}
	for _, r := range old {
		sc.stop(r)
	}
	return ok
}

// replaceAll drains every runner alive and starts as many fresh ones, as
// the kubelet would restart runners whose connection failed.
func (sc *scene) replaceAll(ctx context.Context, epoch uint64) bool {
	old := append([]*runner(nil), sc.alive...)
	for _, r := range old {
		sc.begin(r)
	}
	ok := true
	for range sc.o.Runners {
		if ok = sc.start(ctx, epoch); !ok {
			break
		}
	}
	for _, r := range old {
		sc.stop(r)
	}
	return ok
}

// trickle publishes ids one at a time, each after a random pause shorter
// than a fetch wait, so jobs reach fetches at every point of their wait.
func (sc *scene) trickle(ctx context.Context, ids []string, published *atomic.Int64, stop <-chan struct{}) {
	for _, id := range ids {
		t := time.NewTimer(sc.randN(sc.o.FetchWait))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		}
		if err := sc.call(ctx, "Harness.Publish of job "+id, 60*time.Second, func(ctx context.Context) error {
			return sc.h.Publish(ctx, []string{id})
		}); err != nil {
			sc.fail("%v", err)
			return
		}
		published.Add(1)
	}
}

// awaitPublished waits until the trickle has published n jobs.
func (sc *scene) awaitPublished(published *atomic.Int64, n int) {
	bound := time.Duration(n+1)*sc.o.FetchWait + 60*time.Second
	if !sc.waitFor(bound, func() bool { return published.Load() >= int64(n) }) {
		sc.fail("the trickle published %d of %d jobs within %s", published.Load(), n, bound)
	}
}

// awaitAll waits, up to o.Wait, for every job to be done and the queue to
// hold nothing but the dead-lettered always-failing jobs. It stops early
// when the queue is empty, nothing runs and nothing has completed for a
// while: what is missing then will not come.
func (sc *scene) awaitAll(ctx context.Context) {
	if len(sc.alive) == 0 {
		return // the scenario failed before; the verdict says why
	}
	deadline := time.Now().Add(sc.o.Wait)
	quietFor := max(2*time.Second, 6*sc.o.FetchWait)
	last, since := sc.distinct.Load(), time.Now()
	var c Counts
	var countErr error
	for {
		countErr = sc.call(ctx, "Harness.Count while the runners consume", 20*time.Second, func(ctx context.Context) error {
			var err error
			c, err = sc.h.Count(ctx)
			return err
		})
		d := sc.distinct.Load()
		if d != last {
			last, since = d, time.Now()
		}
		if countErr == nil {
			if d >= int64(sc.expected) && c.Pending == 0 && c.DeadLettered >= sc.sc.always {
				return
			}
			if c.Pending == 0 && sc.inflight() == 0 && time.Since(since) > quietFor {
				sc.note("stopped waiting: for %s nothing completed, nothing ran and the queue counted nothing pending", quietFor.Round(time.Millisecond))
				return
			}
		}
		if time.Now().After(deadline) {
			what := fmt.Sprintf("pending %d, dead-lettered %d", c.Pending, c.DeadLettered)
			if countErr != nil {
				what = "Count failed: " + countErr.Error()
			}
			sc.fail("waited %s (Options.Wait) for every job to be done and the queue to be empty: %d of %d jobs done; the queue counts %s",
				sc.o.Wait, d, sc.expected, what)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inflight counts the jobs the runners alive are running.
func (sc *scene) inflight() int {
	n := 0
	for _, r := range sc.alive {
		n += int(r.inflight.Load())
	}
	return n
}

// waitFor polls cond every 2ms for up to d; it reports whether cond held.
func (sc *scene) waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// call calls fn with a context bounded by bound, and waits for it no
// longer than bound and a second: a call that ignores its context fails,
// named, and is left behind. A panic is returned as an error.
func (sc *scene) call(ctx context.Context, what string, bound time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	res := make(chan error, 1)
	go func() { // joined through res, unless it hangs (then named below)
		defer func() {
			if v := recover(); v != nil {
				res <- fmt.Errorf("panic: %v", v)
			}
		}()
		res <- fn(ctx)
	}()
	t := time.NewTimer(bound + time.Second)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("lameduck: sourcetest: %s: %w", what, err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("lameduck: sourcetest: %s did not return within %s (it ignored its context); left behind", what, bound)
	}
}

// retry calls fn (bounded by 20s in all) until it succeeds: a new Source
// may be refused while the server restarts.
func (sc *scene) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := sc.call(ctx, what, 20*time.Second, fn)
		if err == nil || time.Now().After(deadline) || errors.Is(err, context.Canceled) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// judge fills v from the books and the queue's final counts; countErr,
// when the queue could not be counted, leaves the books alone to judge.
func (sc *scene) judge(v *verdict, final Counts, countErr error) {
	b := sc.books
	v.drains = sc.drains
	v.handBacks = int(b.handBacks.Load())
	v.causes = b.causesString()
	v.deadLettered = final.DeadLettered
	v.pending = final.Pending
	var notDone, dups []string
	for id, rec := range b.ids {
		c := int(rec.completions.Load())
		switch {
		case rec.plan == planAlways:
			if c > 0 {
				sc.fail("job %s, whose handler always fails, completed %d time(s) (the suite's own bug)", id, c)
			}
			continue
		case c == 0:
			notDone = append(notDone, id)
		case c > 1:
			dups = append(dups, fmt.Sprintf("%s×%d", id, c))
			v.duplicates += c - 1
		}
		if c > 0 {
			v.completed++
		}
	}
	sort.Strings(notDone)
	sort.Strings(dups)
	if countErr != nil {
		sc.fail("%v; the books alone: %d job(s) never completed: %s", countErr, len(notDone), list(notDone))
		v.lost, v.pending, v.deadLettered = -1, -1, -1
		sc.judgeBooks(v, dups)
		return
	}
	unexpectedDead := max(0, final.DeadLettered-sc.sc.always)
	v.lost = max(0, len(notDone)-final.Pending-unexpectedDead)
	if v.lost > 0 {
		sc.fail("lost %d job(s): never completed, and the queue counts only %d pending and %d dead-lettered beyond the %d always-failing: %s",
			v.lost, final.Pending, unexpectedDead, sc.sc.always, list(notDone))
	} else if len(notDone) > 0 {
		sc.fail("%d job(s) never completed (%s): the queue holds them still, or dead-lettered them (pending %d, dead-lettered %d)", len(notDone), list(notDone), final.Pending, final.DeadLettered)
	}
	if final.Pending != 0 {
		sc.fail("the queue counts %d job(s) pending after every runner stopped; want 0", final.Pending)
	}
	if final.DeadLettered != sc.sc.always {
		msg := fmt.Sprintf("the queue dead-lettered %d job(s); want exactly the %d whose handler always fails", final.DeadLettered, sc.sc.always)
		b.mu.Lock()
		own := b.handBacks.Load() - int64(b.causes["failure"])
		ackErrs := b.ackErrs
		b.mu.Unlock()
		if final.DeadLettered > sc.sc.always && own > 0 {
			msg += fmt.Sprintf("; the runners handed %d job(s) back for their own reasons (HandBackCause not nil), which must leave a job deliverable whatever its deliveries", own)
		}
		if ackErrs > 0 {
			msg += fmt.Sprintf("; %d Ack(s) failed", ackErrs)
		}
		sc.fail("%s", msg)
	}
	var wrongDead []string
	for _, id := range final.DeadIDs {
		rec := b.ids[id]
		switch {
		case rec == nil:
			wrongDead = append(wrongDead, fmt.Sprintf("%q (never published)", id))
		case rec.plan != planAlways:
			wrongDead = append(wrongDead, fmt.Sprintf("%s (returned by a Fetch %d time(s), completed %d, Ack failed %d)",
				id, rec.deliveries.Load(), rec.completions.Load(), rec.ackFails.Load()))
		}
	}
	if len(wrongDead) > 0 {
		sort.Strings(wrongDead)
		sc.fail("the queue dead-lettered %d job(s) whose handler does not always fail: %s", len(wrongDead), list(wrongDead))
	}
	sc.judgeBooks(v, dups)
}

// judgeBooks judges what the handlers and the runners recorded: the
// duplicates, the ids never published, each side's breaches of the
// contract, the slow fetches; then it moves the failures and notes to v.
func (sc *scene) judgeBooks(v *verdict, dups []string) {
	b := sc.books
	if len(dups) > 0 {
		if sc.sc.atLeastOnce {
			sc.note("%d duplicate completion(s), allowed where connections break (at least once): %s", v.duplicates, list(dups))
		} else {
			sc.fail("%d duplicate completion(s) with every connection up (each Ack is confirmed, so no job may run twice): %s", v.duplicates, list(dups))
		}
	}
	b.mu.Lock()
	unknown := make([]string, 0, len(b.unknown))
	for id, k := range b.unknown {
		unknown = append(unknown, fmt.Sprintf("%q×%d", id, k))
	}
	workerErrs, sourceErrs := b.worker, b.source
	slow, ackErrs, backErrs := b.slowFetch, b.ackErrs, b.backErrs
	b.mu.Unlock()
	sort.Strings(unknown)
	if len(unknown) > 0 {
		sc.fail("the Source delivered job(s) never published in this scenario (Job.ID must return the published id; Reset must empty the queue): %s", list(unknown))
	}
	for _, s := range workerErrs {
		sc.fail("worker: %s", s)
	}
	for _, s := range sourceErrs {
		sc.fail("source: %s", s)
	}
	if ackErrs+backErrs > 0 && sc.sc.atLeastOnce {
		sc.note("%d Ack(s) and %d HandBack(s) failed while connections broke", ackErrs, backErrs)
	}
	if slow > 0 {
		msg := fmt.Sprintf("a Fetch took %s, more than its wait %s plus the relay's round trip %s and %s (a Fetch returns within its wait plus the queue's round trip)",
			slow.Round(time.Millisecond), sc.o.FetchWait, 2*sc.o.Latency, fetchSlack)
		if sc.sc.atLeastOnce {
			sc.note("%s", msg)
		} else {
			sc.fail("source: %s", msg)
		}
	}
	sc.exercised()
	sc.mu.Lock()
	v.failures = append(v.failures, sc.failures...)
	v.notes = append(v.notes, sc.notes...)
	sc.mu.Unlock()
}

// exercised fails a scenario whose drains never took the path it exists
// for: what it proved would be nothing.
func (sc *scene) exercised() {
	if sc.sc.events(sc.o) == 0 {
		return
	}
	sc.books.mu.Lock()
	causes := maps.Clone(sc.books.causes)
	sc.books.mu.Unlock()
	need := ""
	switch {
	case sc.sc.kind == kindDrain && sc.sc.mode == worker.DrainInterrupt:
		need = "interrupted"
	case sc.sc.kind == kindDrain && sc.o.Loops >= 2:
		need = "not-started"
	case sc.sc.kind == kindBound:
		need = "drain-bound"
	case sc.sc.kind == kindEpochs && sc.o.Loops >= 2:
		need = "superseded"
	}
	if need != "" && causes[need] == 0 {
		sc.fail("no job was handed back with cause %s at any of the %d events: the scenario proved nothing (did every drain find jobs left?)", need, sc.sc.events(sc.o))
	}
}

// list names up to 10 items, and how many more.
func list(items []string) string {
	if len(items) <= 10 {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:10], ", ") + fmt.Sprintf(" and %d more", len(items)-10)
}
