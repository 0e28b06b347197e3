package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/worker"
)

// Durations the suite gives every runner: short, so that a scenario takes
// seconds, and far from one another, so that each path is the one taken.
const (
	teardown           = 5 * time.Second        // ShutdownTeardown: its hook share (⅔) bounds the loops' join and Drain
	longDrain          = 30 * time.Second       // DrainTimeout where the bound must never be reached
	failureBackoff     = 10 * time.Millisecond  // FailureBackoff
	failureBackoffMax  = 200 * time.Millisecond // FailureBackoffMax
	epochPoll          = 50 * time.Millisecond  // EpochPoll
	epochMismatchDelay = 200 * time.Millisecond // EpochMismatchDelay
	guard              = 30 * time.Second       // the longest a frozen fetch or handler is held
)

// errPlanned is what a job planned to fail returns; panicPlanned is what one
// planned to panic panics with.
var (
	errPlanned   = errors.New("lameduck: sourcetest: planned failure of the job's handler")
	panicPlanned = "lameduck: sourcetest: planned panic of the job's handler"
)

// runner is one worker.Worker the scenario runs, with its Source.
type runner struct {
	sc       *scene
	n        int    // its number in the scenario, from 1
	epoch    uint64 // its rollout epoch
	w        *worker.Worker
	closeSrc func()
	cancel   context.CancelFunc
	done     chan error   // Run's result
	inflight atomic.Int32 // its jobs in a handler now
	drainErr atomic.Value // string: what its Source's Drain returned, when not nil
	runErr   error        // Run's result, once stopped

	private atomic.Int64 // fetches it may make beyond the scenario's budget (to freeze it)

	mu           sync.Mutex
	deliveries   []*delivery   // guarded by mu: every job a Fetch returned
	holdFetches  bool          // guarded by mu: up to maxHold jobs a Fetch returns are held
	holdHandlers bool          // guarded by mu: up to maxBlock handlers are held before they start
	maxBlock     int           // guarded by mu
	maxHold      int           // guarded by mu
	held         int           // guarded by mu: fetches held now
	blocked      int           // guarded by mu: handlers held now
	fetchGo      chan struct{} // guarded by mu: closed to let the held fetches go
	handleGo     chan struct{} // guarded by mu: closed to let the held handlers go
}

// freeze makes the runner hold jobs at its drain: it may fetch one job per
// loop beyond the scenario's budget; up to half of its loops (at least
// one) hold their job in the handler before it starts, and the others hold
// theirs in the Fetch that returned it, until thawHandlers and
// thawFetches. The runner then has jobs in flight and fetches under way
// when its drain begins.
func (r *runner) freeze() {
	loops := r.sc.o.Loops
	r.mu.Lock()
	r.holdFetches, r.holdHandlers = true, true
	r.maxBlock = max(1, loops/2)
	r.maxHold = loops - r.maxBlock
	r.fetchGo, r.handleGo = make(chan struct{}), make(chan struct{})
	r.mu.Unlock()
	r.private.Store(int64(loops))
	r.sc.budgetMoved()
}

// isFrozen reports whether each loop of the runner holds a job, at least
// one of them in its handler.
func (r *runner) isFrozen() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blocked >= 1 && r.blocked+r.held >= r.sc.o.Loops
}

// thawFetches lets the held fetches return their jobs.
func (r *runner) thawFetches() { r.thaw(&r.holdFetches, &r.fetchGo) }

// thawHandlers lets the held handlers run.
func (r *runner) thawHandlers() { r.thaw(&r.holdHandlers, &r.handleGo) }

// thaw clears *held and closes *gate, which the goroutines it held wait
// on; once, however often it is called. held and gate are fields of r
// guarded by r.mu.
func (r *runner) thaw(held *bool, gate *chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *held {
		*held = false
		close(*gate)
	}
}

// holdFetch holds a job a Fetch returned while the runner is frozen, up to
// maxHold of them.
func (r *runner) holdFetch() {
	r.mu.Lock()
	if !r.holdFetches || r.held >= r.maxHold {
		r.mu.Unlock()
		return
	}
	ch := r.fetchGo
	r.held++
	r.mu.Unlock()
	t := time.NewTimer(guard)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		r.sc.fail("a fetch of runner %d was held %s by the suite and never let go (the suite's own bug)", r.n, guard)
	}
	r.mu.Lock()
	r.held--
	r.mu.Unlock()
}

// ticket is what lets a Fetch ask the queue.
type ticket int8

const (
	noTicket      ticket = iota // the budget is spent: the Fetch returns an idle cycle
	budgetTicket                // from the scenario's budget
	privateTicket               // from the runner's own, while it freezes
)

// ticket waits up to wait for a ticket to fetch: one of the runner's own,
// or one of the scenario's budget. It returns noTicket when none came
// within wait, the runner's drain began, or (at once) its startup is not
// done: the Fetch then returns an idle cycle without asking the queue, as
// a queue with nothing to deliver would.
func (r *runner) ticket(wait time.Duration) ticket {
	sc := r.sc
	var timeout <-chan time.Time
	for {
		moved := sc.budgetChan()
		if take(&r.private) {
			return privateTicket
		}
		if take(&sc.budget) {
			return budgetTicket
		}
		if !r.w.Lifecycle().Events().StartupDone.Fired() {
			// The runner starts once each loop has cycled: an idle cycle
			// now, not after a whole wait, so a fresh runner starts at
			// once whatever the budget.
			time.Sleep(time.Millisecond)
			return noTicket
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-moved:
		case <-timeout:
			return noTicket
		case <-r.w.Lifecycle().Events().ShutdownInitiated.Done():
			return noTicket
		}
	}
}

// untake gives back a ticket whose Fetch returned no job.
func (r *runner) untake(t ticket) {
	switch t {
	case privateTicket:
		r.private.Add(1)
	case budgetTicket:
		r.sc.budget.Add(1)
	default:
		return
	}
	r.sc.budgetMoved()
}

// take takes one from n if it is positive.
func take(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// gate holds a handler before it starts while the runner is frozen (up to
// maxBlock of them), until thawHandlers or its context ends; it returns the
// context's cause in that case.
func (r *runner) gate(ctx context.Context) error {
	r.mu.Lock()
	if !r.holdHandlers || r.blocked >= r.maxBlock {
		r.mu.Unlock()
		return nil
	}
	ch := r.handleGo
	r.blocked++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.blocked--
		r.mu.Unlock()
	}()
	t := time.NewTimer(guard)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		r.sc.fail("a handler of runner %d was held %s by the suite and neither let go nor cancelled by the drain", r.n, guard)
		return errors.New("lameduck: sourcetest: handler held too long")
	}
}

// handle is the runner's handler: it records each attempt and does what
// the job's plan says, honouring ctx.
func (r *runner) handle(ctx context.Context, job worker.Job) error {
	sc := r.sc
	d, ok := job.(*delivery)
	if !ok {
		sc.fail("the loop gave the handler a job (%T) the Source did not return", job)
		return nil
	}
	d.hctx.Store(ctx)
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	rec := sc.books.ids[d.id]
	if rec == nil { // never published: acknowledged, and counted against the Source
		d.ended.Store(int32(done))
		return nil
	}
	if err := r.gate(ctx); err != nil {
		d.ended.Store(int32(cancelled))
		return err
	}
	n := rec.attempts.Add(1)
	switch {
	case rec.plan == planAlways, rec.plan == planErrorOnce && n == 1:
		d.ended.Store(int32(failed))
		return errPlanned
	case rec.plan == planPanicOnce && n == 1:
		d.ended.Store(int32(failed))
		panic(panicPlanned)
	}
	t := time.NewTimer(sc.jobDuration())
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		d.ended.Store(int32(cancelled))
		return context.Cause(ctx)
	}
	d.ended.Store(int32(done))
	if rec.completions.Add(1) == 1 {
		sc.distinct.Add(1)
	}
	sc.books.completions.Add(1)
	return nil
}

// superseded reports whether the runner's readiness says it is superseded.
func (r *runner) superseded() bool {
	rec := httptest.NewRecorder()
	r.w.Lifecycle().ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code == http.StatusServiceUnavailable && strings.Contains(rec.Body.String(), "superseded")
}

// config is the worker's configuration for runner n: the Lifecycle's
// defaults made short, the process environment ignored.
func (sc *scene) config(n int, epoch uint64) worker.Config {
	return worker.Config{
		Lifecycle: lameduck.Config{
			Env:              lameduck.EnvLocal,
			LookupEnv:        func(string) (string, bool) { return "", false },
			ProbeAddr:        "127.0.0.1:0",
			IgnoreSignals:    true,
			DrainMode:        sc.sc.mode,
			DrainTimeout:     sc.drainTimeout(),
			ShutdownTeardown: teardown,
			Logger:           slog.New(slog.NewTextHandler(sc.logs, nil)).With("runner", n),
			OnPanic:          sc.onPanic,
		},
		Epoch:              epoch,
		Epochs:             sc.epochs,
		EpochPoll:          epochPoll,
		EpochMismatchDelay: epochMismatchDelay,
		FetchWait:          sc.o.FetchWait,
		FailureBackoff:     failureBackoff,
		FailureBackoffMax:  failureBackoffMax,
	}
}

// drainTimeout is the runners' drain bound: short in the drain-bound
// scenario, out of reach elsewhere.
func (sc *scene) drainTimeout() time.Duration {
	if sc.sc.kind == kindBound {
		return 400*time.Millisecond + 4*sc.o.Latency
	}
	return longDrain
}

// onPanic hears every panic a runner recovers: the planned ones are
// expected, any other is the Source's (or the worker's).
func (sc *scene) onPanic(what string, v any, stack []byte) {
	if s, ok := v.(string); ok && s == panicPlanned {
		return
	}
	sc.books.sourceBroke("panic in %s: %v\n%s", what, v, firstLines(string(stack), 16))
}

// startRunner makes a Source, a worker with o.Loops loops on it, and runs
// it; it returns once the worker's startup is done (every loop has cycled).
func (sc *scene) startRunner(ctx context.Context, epoch uint64) (*runner, error) {
	sc.nextN++
	r := &runner{sc: sc, n: sc.nextN, epoch: epoch, done: make(chan error, 1)}
	var src worker.Source
	var closeSrc func()
	err := sc.retry(ctx, fmt.Sprintf("Harness.NewSource for runner %d", r.n), func(ctx context.Context) error {
		var err error
		src, closeSrc, err = sc.h.NewSource(ctx, sc.relay.Addr())
		if err == nil && (src == nil || closeSrc == nil) {
			return errors.New("it returned a nil Source or close func")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	r.closeSrc = closeSrc
	w, err := worker.New(sc.config(r.n, epoch))
	if err != nil {
		closeSrc()
		return nil, fmt.Errorf("lameduck: sourcetest: worker.New for runner %d: %w", r.n, err)
	}
	r.w = w
	rs := &recSource{inner: src, r: r}
	for i := range sc.o.Loops {
		if err := w.AddLoop(worker.Loop{Name: fmt.Sprintf("loop-%d", i+1), Source: rs, Handle: r.handle}); err != nil {
			closeSrc()
			return nil, fmt.Errorf("lameduck: sourcetest: AddLoop for runner %d: %w", r.n, err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- w.Run(runCtx) }() // joined by stop, through done
	sc.alive = append(sc.alive, r)
	bound := 20*time.Second + 3*sc.o.FetchWait
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-w.Lifecycle().Events().StartupDone.Done():
		return r, nil
	case err := <-r.done:
		r.done <- err
		return r, fmt.Errorf("lameduck: sourcetest: runner %d's Run returned before its startup was done: %v", r.n, err)
	case <-t.C:
		return r, fmt.Errorf("lameduck: sourcetest: runner %d's startup not done within %s: a loop never cycled (its first Fetch never returned)", r.n, bound)
	}
}

// begin starts runner r's drain: its Run's context is cancelled (as the
// kubelet's SIGTERM would start the sequence), and begin returns once the
// sequence has started.
func (sc *scene) begin(r *runner) {
	sc.remove(r)
	sc.drains++
	r.cancel()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-r.w.Lifecycle().Events().ShutdownInitiated.Done():
	case <-t.C:
		sc.fail("runner %d: the drain never began (ShutdownInitiated) within 10s of its Run's context being cancelled", r.n)
	}
}

// remove takes r out of the runners alive.
func (sc *scene) remove(r *runner) {
	for i, o := range sc.alive {
		if o == r {
			sc.alive = append(sc.alive[:i], sc.alive[i+1:]...)
			return
		}
	}
}

// stop waits for r's Run to return after begin, closes its Source, and
// checks the runner settled every job it was given.
func (sc *scene) stop(r *runner) {
	bound := sc.drainTimeout() + teardown + 15*time.Second
	if sc.sc.kind != kindBound {
		bound = teardown + 15*time.Second // a drain of a few-ms job ends long before its bound
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r.runErr = <-r.done:
		r.done <- r.runErr
	case <-t.C:
		r.thawFetches()
		r.thawHandlers()
		sc.fail("runner %d: Run did not return within %s of its drain (the loops' join, a Fetch that never returns, or the Source's Drain); left behind", r.n, bound)
		return
	}
	r.thawFetches()
	r.thawHandlers()
	if err := sc.call(context.Background(), fmt.Sprintf("the close func of runner %d's Source", r.n), 20*time.Second, func(context.Context) error {
		r.closeSrc()
		return nil
	}); err != nil {
		sc.fail("%v", err)
	}
	sc.checkRun(r)
}

// checkRun checks what runner r left: every job it was given settled
// exactly once, its Run's error and its Source's Drain's.
func (sc *scene) checkRun(r *runner) {
	r.mu.Lock()
	ds := r.deliveries
	r.mu.Unlock()
	for _, d := range ds {
		if d.settled.Load() == 0 {
			sc.books.workerBroke("job %s, delivered to runner %d, was neither acknowledged nor handed back when its Run returned", d.id, r.n)
		}
	}
	err := r.runErr
	switch {
	case err == nil:
	case sc.sc.kind == kindBound && isOnly(err, worker.ErrDrainBound):
	case sc.sc.atLeastOnce:
		sc.note("runner %d: Run returned: %v", r.n, err)
	default:
		sc.fail("runner %d: Run returned an error after a clean drain: %v", r.n, err)
	}
	if s, _ := r.drainErr.Load().(string); s != "" {
		if sc.sc.atLeastOnce {
			sc.note("runner %d: the Source's Drain returned: %s", r.n, s)
		} else {
			sc.fail("runner %d: the Source's Drain returned an error after a clean drain (with the connection up, nothing should be left to the queue): %s", r.n, s)
		}
	}
}

// isOnly reports whether err wraps target and nothing else: each error it
// joins wraps target.
func isOnly(err, target error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !isOnly(e, target) {
				return false
			}
		}
		return len(j.Unwrap()) > 0
	}
	return errors.Is(err, target)
}

// stopAll drains every runner alive at once and waits for each.
func (sc *scene) stopAll() {
	rs := append([]*runner(nil), sc.alive...)
	for _, r := range rs {
		sc.begin(r)
		r.thawFetches()
		r.thawHandlers()
	}
	for _, r := range rs {
		sc.stop(r)
	}
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
