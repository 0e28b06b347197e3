package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
)

// loop is one registered Loop and what liveness knows of it.
type loop struct {
	Loop                    // immutable
	w         *Worker       // immutable
	threshold time.Duration // immutable: max(floor, 20 × FetchWait)
	cycled    chan struct{} // closed at the first cycle

	mu        sync.Mutex
	began     time.Time               // guarded by mu: when the loop started; zero before
	lastCycle time.Time               // guarded by mu: the end of the last fetch or job
	cycles    uint64                  // guarded by mu
	jobID     string                  // guarded by mu: the job in flight; "" when idle
	jobBegan  time.Time               // guarded by mu
	jobCancel context.CancelCauseFunc // guarded by mu: cancels the job in flight
	failing   bool                    // guarded by mu: the last fetch failed (logged once)
}

// busy reports the job in flight, if any, and its age.
func (l *loop) busy() (id string, age time.Duration, ok bool) {
	now := l.w.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jobID == "" {
		return "", 0, false
	}
	return l.jobID, now.Sub(l.jobBegan), true
}

// cancelJob cancels the job in flight, if any, with cause.
func (l *loop) cancelJob(cause error) {
	l.mu.Lock()
	cancel := l.jobCancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
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
		close(l.cycled)
	}
}

// idle reports, for an idle loop that has started, how long since it last
// cycled (or started); ok is false while a job runs or before the start.
func (l *loop) idle(now time.Time) (idleFor time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jobID != "" || l.began.IsZero() {
		return 0, false
	}
	ref := l.lastCycle
	if ref.IsZero() {
		ref = l.began
	}
	return now.Sub(ref), true
}

// run is the loop's goroutine: fetch, run, acknowledge or hand back, until
// the drain begins.
func (l *loop) run() {
	w := l.w
	ctx := w.fetchCtx
	l.mu.Lock()
	l.began = w.clock.Now()
	l.mu.Unlock()
	for ctx.Err() == nil {
		if sup, moved := w.supersededNow(); sup {
			// Superseded: compete for no job, or the old fleet would win
			// every fetch against the new one and delay each job. The loop
			// is idle on purpose; each pause of one fetch wait counts as a
			// cycle, so liveness stays 200 while it idles.
			l.cycle()
			l.pause(ctx, moved)
			continue
		}
		job, err := l.fetch(ctx)
		l.cycle()
		if err != nil {
			l.fetchFailed(err)
			w.sleep(ctx, min(l.FetchWait, time.Second))
			continue
		}
		l.fetchOK()
		if job == nil {
			continue
		}
		switch {
		case ctx.Err() != nil || w.lc.Phase() >= lameduck.PhaseDraining:
			// Delivered as the drain began: never started, so it goes back
			// at once for another runner.
			l.handBack(job, 0, "delivered as the drain began; not started")
		case w.isSuperseded():
			// Delivered as the runner was superseded (the fetch was under
			// way): handed back once; the loop fetches no more.
			d := w.cfg.EpochMismatchDelay
			l.handBack(job, d, fmt.Sprintf("superseded: epoch %d < newest %d; not started, redelivery delayed %s", w.cfg.Epoch, w.newest.Load(), d))
		default:
			l.runJob(job)
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

// fetch calls the Source, recovering a panic as an error.
func (l *loop) fetch(ctx context.Context) (job Job, err error) {
	defer func() {
		if v := recover(); v != nil {
			l.w.panicked("fetch "+l.Name, v)
			job, err = nil, fmt.Errorf("panic: %v", v)
		}
	}()
	return l.Source.Fetch(ctx, l.FetchWait)
}

func (l *loop) fetchFailed(err error) {
	l.mu.Lock()
	was := l.failing
	l.failing = true
	l.mu.Unlock()
	if !was {
		l.w.log.Warn("lameduck: worker: fetch failed; retrying (the loop keeps cycling, so liveness stays 200)",
			"loop", l.Name, "error", err.Error())
	}
}

func (l *loop) fetchOK() {
	l.mu.Lock()
	was := l.failing
	l.failing = false
	l.mu.Unlock()
	if was {
		l.w.log.Info("lameduck: worker: fetch works again", "loop", l.Name)
	}
}

// runJob runs one job under a context the drain can cancel, then
// acknowledges it or hands it back.
func (l *loop) runJob(job Job) {
	w := l.w
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	id := job.ID()
	began := w.clock.Now()
	l.mu.Lock()
	l.jobID, l.jobBegan, l.jobCancel = id, began, cancel
	l.mu.Unlock()
	if w.fetchCtx.Err() != nil && w.cfg.DrainMode == lameduck.DrainInterrupt {
		cancel(ErrInterrupted) // the drain began between the check and now
	}

	err := l.handle(ctx, job)

	took := w.clock.Now().Sub(began)
	l.mu.Lock()
	l.jobID, l.jobBegan, l.jobCancel = "", time.Time{}, nil
	l.mu.Unlock()
	l.cycle()
	if err == nil {
		if aerr := l.settle("ack", func() error { return job.Ack(context.Background()) }); aerr != nil {
			w.log.Warn("lameduck: worker: job done but its acknowledgement failed; the queue may deliver it again",
				"loop", l.Name, "job", id, "error", aerr.Error())
		}
		return
	}
	why := "failed: " + err.Error()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		why = cause.Error()
	}
	l.handBack(job, 0, fmt.Sprintf("%s (ran %s)", why, took.Round(time.Millisecond)))
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

func (l *loop) handBack(job Job, delay time.Duration, why string) {
	err := l.settle("hand back", func() error { return job.HandBack(context.Background(), delay) })
	attrs := []any{"loop", l.Name, "job", job.ID(), "delay", delay.String()}
	if err != nil {
		l.w.log.Warn("lameduck: worker: handing job back failed; the queue redelivers it when its ack wait expires: "+why,
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
