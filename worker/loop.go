package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck"
)

// loop is one registered Loop and what liveness knows of it.
type loop struct {
	Loop                      // immutable
	w         *Worker         // immutable
	threshold time.Duration   // immutable: max(floor, 20 × FetchWait)
	cycled    chan struct{}   // closed at the first cycle, or when the Source says it is consuming
	consuming sync.Once       // closes cycled
	fetchCtx  context.Context // immutable: the worker's exit context, with Consuming's callback

	mu         sync.Mutex
	began      time.Time // guarded by mu: when the loop started; zero before
	lastCycle  time.Time // guarded by mu: the end of the last fetch or job
	cycles     uint64    // guarded by mu
	deliveries uint64    // guarded by mu: jobs delivered to this loop so far
	cur        *inFlight // guarded by mu: the job in flight; nil when idle
	failing    bool      // guarded by mu: the last fetch failed (logged once)
	silent     int       // guarded by mu: fetches in a row that ended in silence (ErrNoReply)
}

// inFlight is a job the loop is running. Whether a job is in flight is
// whether the loop holds one, never what its ID says: a job may have an
// empty ID.
type inFlight struct {
	job      Job                     // immutable
	name     string                  // immutable: its ID, or <loop>#<delivery> when it has none
	began    time.Time               // immutable
	ctx      context.Context         // immutable: the handler's
	cancel   context.CancelCauseFunc // immutable
	settled  atomic.Bool             // Ack or HandBack was called (by the loop, or by the drain at its end): never twice
	asked    atomic.Value            // error: the cause with which the runner asked the handler to stop; nil before
	settling atomic.Bool             // the handler has returned; the loop is in Ack or HandBack
}

// markConsuming closes cycled once: the loop has cycled, or its Source
// said the queue holds its request (Consuming).
func (l *loop) markConsuming() { l.consuming.Do(func() { close(l.cycled) }) }

// busy reports the job in flight, if any: its name and age.
func (l *loop) busy() (name string, age time.Duration, ok bool) {
	return l.busyAt(l.w.clock.Now())
}

// busyAt is busy with the age taken at now.
func (l *loop) busyAt(now time.Time) (name string, age time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return "", 0, false
	}
	return l.cur.name, now.Sub(l.cur.began), true
}

// settlingNow reports whether the loop's job has returned from its
// handler and is being acknowledged or handed back.
func (l *loop) settlingNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur != nil && l.cur.settling.Load()
}

// cancelJob cancels the job in flight, if any, with cause.
func (l *loop) cancelJob(cause error) {
	l.mu.Lock()
	cur := l.cur
	l.mu.Unlock()
	if cur != nil {
		cur.asked.CompareAndSwap(nil, cause)
		cur.cancel(cause)
	}
}

// giveUpSettle bounds the hand-back giveUp makes as the hook share ends.
const giveUpSettle = 5 * time.Second

// giveUp hands the job in flight back now, if the loop has not settled it:
// at the end of the teardown's hook share, where its handler has still not
// returned after its context was cancelled. The handler's late return then
// settles nothing.
func (l *loop) giveUp() {
	now := l.w.clock.Now()
	l.mu.Lock()
	cur := l.cur
	l.mu.Unlock()
	if cur == nil || !cur.settled.CompareAndSwap(false, true) {
		return
	}
	cause := context.Cause(cur.ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		cause = errExit
	}
	age := now.Sub(cur.began).Round(time.Millisecond)
	l.w.log.Error("lameduck: worker: job's handler ignored its context; handing the job back while it still runs, so the queue does not wait for its ack deadline",
		"loop", l.Name, "job", cur.name, "age", age.String(), "cause", cause.Error())
	ctx, cancel := context.WithTimeout(context.Background(), giveUpSettle)
	defer cancel()
	l.handBack(ctx, cur.job, cur.name, 0, cause, fmt.Sprintf("%s; its handler ignored its context (age %s)", cause.Error(), age))
}

// cycle records one idle cycle (a fetch that returned, or a job that ended).
func (l *loop) cycle() {
	now := l.w.clock.Now()
	l.mu.Lock()
	first := l.cycles == 0
	l.cycles++
	l.lastCycle = now
	l.mu.Unlock()
	if first {
		l.markConsuming()
	}
}

// idle reports, for an idle loop that has started, how long since it last
// cycled (or started), and how many fetches in a row ended in silence; ok
// is false while a job runs or before the start.
func (l *loop) idle(now time.Time) (idleFor time.Duration, silent int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil || l.began.IsZero() {
		return 0, 0, false
	}
	ref := l.lastCycle
	if ref.IsZero() {
		ref = l.began
	}
	return now.Sub(ref), l.silent, true
}

// run is the loop's goroutine: fetch, run, acknowledge or hand back, until
// the drain begins. The drain stops it asking (w.stopCtx); a fetch under way
// is never cancelled by it, only waited for: its job, if one comes, is
// handed back unstarted (docs/runners.md, "The drain").
func (l *loop) run() {
	w := l.w
	stop := w.stopCtx
	l.mu.Lock()
	l.began = w.clock.Now()
	l.mu.Unlock()
	// The signal cancels stop from a goroutine of its own, so the phase is
	// asked too: a job handed back because the drain began must be the
	// loop's last fetch.
	for stop.Err() == nil && w.lc.Phase() < lameduck.PhaseDraining {
		if sup, moved := w.supersededNow(); sup {
			// Superseded: compete for no job, or the old fleet would win
			// every fetch against the new one and delay each job. The loop
			// is idle on purpose; each pause of one fetch wait counts as a
			// cycle, so liveness stays 200 while it idles.
			l.cycle()
			l.pause(stop, moved)
			continue
		}
		job, err := l.fetch()
		if err != nil && job != nil {
			// Against the contract, but a job the queue delivered is
			// never dropped: it goes back unstarted.
			name := l.deliver(job)
			w.log.Error("lameduck: worker: the Source's Fetch returned a job and an error; handing the job back unstarted", "loop", l.Name, "job", name, "error", err.Error())
			l.handBack(w.exitCtx, job, name, 0, ErrNotStarted, ErrNotStarted.Error()+"; the fetch also failed: "+err.Error())
		}
		if errors.Is(err, ErrNoReply) {
			// Silence: the queue server neither delivered nor ended the
			// request. Not a cycle: a loop that only gets silence is
			// stalled, however often it asks.
			l.fetchFailed(err, true)
			w.sleep(stop, min(l.FetchWait, time.Second))
			continue
		}
		l.cycle()
		if err != nil {
			l.fetchFailed(err, false)
			w.sleep(stop, min(l.FetchWait, time.Second))
			continue
		}
		l.fetchOK()
		if job == nil {
			continue
		}
		name := l.deliver(job)
		switch {
		case stop.Err() != nil || w.lc.Phase() >= lameduck.PhaseDraining:
			// Delivered as the drain began (the fetch was under way):
			// never started, so it goes back at once for another runner.
			l.handBack(w.exitCtx, job, name, 0, ErrNotStarted, ErrNotStarted.Error())
		case w.isSuperseded():
			// Delivered as the runner was superseded (the fetch was under
			// way): handed back once; the loop fetches no more.
			d := w.set.EpochMismatchDelay
			l.handBack(w.exitCtx, job, name, d, ErrSuperseded,
				fmt.Sprintf("%s: epoch %d < newest %d; not started, redelivery delayed %s", ErrSuperseded.Error(), w.set.Epoch, w.newest.Load(), d))
		default:
			l.runJob(job, name)
		}
	}
}

// pause waits one fetch wait on the worker's clock, or until the epoch
// moves or the drain begins.
func (l *loop) pause(ctx context.Context, moved <-chan struct{}) {
	t := l.w.clock.NewTimer(l.FetchWait)
	defer t.Stop()
	select {
	case <-t.C():
	case <-moved:
	case <-ctx.Done():
	}
}

// fetch calls the Source with the loop's fetch context (it ends only at
// exit, and carries Consuming's callback), recovering a panic as an error.
func (l *loop) fetch() (job Job, err error) {
	defer func() {
		if v := recover(); v != nil {
			l.w.panicked("fetch "+l.Name, v)
			job, err = nil, fmt.Errorf("panic: %v", v)
		}
	}()
	return l.Source.Fetch(l.fetchCtx, l.FetchWait)
}

// fetchFailed records a failed fetch, logged when the loop starts failing
// or its failure changes kind (silence, or an error).
func (l *loop) fetchFailed(err error, silent bool) {
	l.mu.Lock()
	was, wasSilent := l.failing, l.silent > 0
	l.failing = true
	if silent {
		l.silent++
	} else {
		l.silent = 0
	}
	l.mu.Unlock()
	switch {
	case silent && (!was || !wasSilent):
		l.w.log.Warn(fmt.Sprintf("lameduck: worker: fetch got no reply from the queue server; retrying (not a cycle: liveness fails after %s of this)", l.threshold),
			"loop", l.Name, "error", err.Error())
	case !silent && (!was || wasSilent):
		l.w.log.Warn("lameduck: worker: fetch failed; retrying (the loop keeps cycling, so liveness stays 200)",
			"loop", l.Name, "error", err.Error())
	}
}

func (l *loop) fetchOK() {
	l.mu.Lock()
	was := l.failing
	l.failing, l.silent = false, 0
	l.mu.Unlock()
	if was {
		l.w.log.Info("lameduck: worker: fetch works again", "loop", l.Name)
	}
}

// deliver counts a delivered job and names it: its ID, or <loop>#<n>, the
// delivery's number in this loop, when the ID is empty or panics.
func (l *loop) deliver(job Job) string {
	l.mu.Lock()
	l.deliveries++
	n := l.deliveries
	l.mu.Unlock()
	id := l.jobID(job)
	if id == "" {
		id = fmt.Sprintf("%s#%d", l.Name, n)
	}
	return id
}

// jobID calls the Job's ID, recovering a panic as "".
func (l *loop) jobID(job Job) (id string) {
	defer func() {
		if v := recover(); v != nil {
			l.w.panicked("job ID "+l.Name, v)
			id = ""
		}
	}()
	return job.ID()
}

// runJob runs one job under a context the drain can cancel, then
// acknowledges it or hands it back, unless the drain's end already handed
// it back.
func (l *loop) runJob(job Job, name string) {
	w := l.w
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	began := w.clock.Now()
	cur := &inFlight{job: job, name: name, began: began, ctx: ctx, cancel: cancel}
	l.mu.Lock()
	l.cur = cur
	l.mu.Unlock()
	if w.stopCtx.Err() != nil && w.cfg.DrainMode == DrainInterrupt {
		cur.asked.CompareAndSwap(nil, ErrInterrupted)
		cancel(ErrInterrupted) // the drain began between the check and now
	}

	err := l.handle(ctx, job)

	took := w.clock.Now().Sub(began)
	// The job stays the loop's until it is settled: a loop stuck in Ack or
	// HandBack is busy, not idle, and Run names it at exit.
	cur.settling.Store(true)
	defer func() {
		l.mu.Lock()
		l.cur = nil
		l.mu.Unlock()
		l.cycle()
	}()
	if !cur.settled.CompareAndSwap(false, true) {
		w.log.Warn("lameduck: worker: job's handler returned after the drain had handed the job back; it is neither acknowledged nor handed back again",
			"loop", l.Name, "job", name, "ran", took.Round(time.Millisecond).String())
		return
	}
	ran := took.Round(time.Millisecond).String()
	asked, _ := cur.asked.Load().(error)
	if err == nil {
		aerr := l.settle("ack", func() error { return job.Ack(w.exitCtx) })
		switch {
		case aerr != nil:
			w.log.Warn("lameduck: worker: job done but its acknowledgement failed; the queue may deliver it again (at least once)",
				"loop", l.Name, "job", name, "ran", ran, "error", aerr.Error())
		case asked != nil:
			w.log.Info("lameduck: worker: job done and acknowledged: its handler returned nil after it was asked to stop ("+asked.Error()+")",
				"loop", l.Name, "job", name, "ran", ran)
		}
		return
	}
	// A job the runner cancelled (interrupt, drain bound, exit) goes back
	// for the runner's reason, whatever error its handler returned.
	cause := context.Cause(ctx)
	if cause != nil {
		l.handBack(w.exitCtx, job, name, 0, cause, fmt.Sprintf("%s (ran %s)", cause.Error(), ran))
		return
	}
	d := w.failureBackoff(job)
	l.handBack(w.exitCtx, job, name, d, nil, fmt.Sprintf("failed: %s (ran %s); redelivery delayed %s", err.Error(), ran, d))
}

// failureBackoff is the delay of a failed job's hand-back:
// FailureBackoff × 2^(delivery−1), at most FailureBackoffMax, the delivery
// read from the job's [Delivered] (1 when it has none).
func (w *Worker) failureBackoff(job Job) time.Duration {
	n := 1
	if d, ok := job.(Delivered); ok {
		func() {
			defer func() { _ = recover() }()
			n = d.Delivery()
		}()
	}
	base, most := w.set.FailureBackoff, w.set.FailureBackoffMax
	d := base
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// handle calls Handle, recovering a panic as an error.
func (l *loop) handle(ctx context.Context, job Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			l.w.panicked("job "+l.Name, v)
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return l.Handle(ctx, job)
}

// handBack hands job back with delay under ctx; cause is the runner's
// reason (HandBackCause), nil for the job's own failure.
func (l *loop) handBack(ctx context.Context, job Job, name string, delay time.Duration, cause error, why string) {
	if cause != nil {
		ctx = context.WithValue(ctx, causeKey{}, cause)
	}
	err := l.settle("hand back", func() error { return job.HandBack(ctx, delay) })
	if errors.Is(cause, ErrDrainBound) {
		l.w.cut.Add(1)
	}
	attrs := []any{"loop", l.Name, "job", name, "delay", delay.String()}
	if err != nil {
		l.w.log.Error("lameduck: worker: handing job back failed ("+why+"); what the queue does with it now is in the error",
			append(attrs, "error", err.Error())...)
		return
	}
	l.w.log.Info("lameduck: worker: job handed back: "+why, attrs...)
}

// settle calls a Job's Ack or HandBack, recovering a panic as an error:
// a queue client's bug must not take the process down mid-drain.
func (l *loop) settle(what string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			l.w.panicked(what+" "+l.Name, v)
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return fn()
}

// panicked hands a recovered panic to Config.OnPanic.
func (w *Worker) panicked(what string, v any) {
	stack := debug.Stack()
	w.log.Error(fmt.Sprintf("lameduck: worker: panic in %s: %v", what, v), "stack", string(stack))
	if w.cfg.OnPanic != nil {
		func() {
			defer func() { _ = recover() }()
			w.cfg.OnPanic(what, v, stack)
		}()
	}
}
