package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// EpochSource reports the newest rollout epoch in a runner fleet
// (docs/runners.md, "Rollout epochs"). Each runner carries the epoch of its
// pod template (Config.Epoch, LAMEDUCK_EPOCH); a runner whose epoch is
// older than the newest one is superseded: its readiness is 503
// "superseded", its loops stop fetching, and a job delivered to one of them
// before it stopped is handed back, delayed by Config.EpochMismatchDelay, so
// that the newer fleet takes it.
//
// The newest epoch is the newest among the runners alive now, not the
// newest ever seen: after a rollback (the newer runners gone) the answer
// falls back, and the older runners take jobs again. A source should stop
// counting a runner that exits or stops answering (the demo worker's
// key-value source ignores a runner that missed three polls), and a
// runner that is draining, which takes no new job.
//
// Implementations must be safe for concurrent use.
type EpochSource interface {
	// Newest publishes mine, this runner's epoch, and returns the newest
	// epoch of the runners alive now, mine included: at least mine. It may
	// be lower than an earlier answer (a rollback). On an error the worker
	// keeps its last answer and logs the failure once. ctx ends after
	// Config.EpochPoll; a call still running then counts as an error, is
	// never waited for (not by the poller, not by Run's exit beyond its 1s
	// wait), and the source is not asked again until it has returned. A
	// panic is recovered as an error.
	Newest(ctx context.Context, mine uint64) (uint64, error)
}

// StaticEpochs is an EpochSource that always answers its own value (or the
// runner's epoch, when that is newer): the newest epoch is known when the
// process starts and never changes while it runs. StaticEpochs(0), the
// default, never supersedes anyone.
type StaticEpochs uint64

// Newest returns max(s, mine). It never fails.
func (s StaticEpochs) Newest(_ context.Context, mine uint64) (uint64, error) {
	return max(uint64(s), mine), nil
}

// DefaultEpochPoll is how often a worker asks its EpochSource when
// Config.EpochPoll is zero.
const DefaultEpochPoll = 10 * time.Second

// isSuperseded reports whether a newer epoch than this runner's is known.
func (w *Worker) isSuperseded() bool { return w.newest.Load() > w.set.Epoch }

// supersededNow reports whether this runner is superseded, and a channel
// closed when that changes, read together so no change is missed.
func (w *Worker) supersededNow() (bool, <-chan struct{}) {
	w.epochMu.Lock()
	defer w.epochMu.Unlock()
	return w.isSuperseded(), w.epochMoved
}

// pollLoop asks the epoch source every poll interval until Run returns.
func (w *Worker) pollLoop() {
	for {
		w.sleep(w.pollCtx, w.poll)
		if w.pollCtx.Err() != nil {
			return
		}
		w.pollEpoch(w.pollCtx)
	}
}

// errStillAsking is the answer of a poll made while the previous call of
// Newest, past its bound, has not returned.
var errStillAsking = errors.New("the previous call of Newest has not returned; it ignored its context")

// ask calls the epoch source's Newest in a goroutine of its own (counted in
// asks), bounded by the poll interval, and waits for it no longer than
// that: a source that ignores its context delays neither the poller nor
// Run, and is not asked again until that call has returned. A panic is
// recovered as an error.
func (w *Worker) ask(ctx context.Context) (uint64, error) {
	if !w.asking.CompareAndSwap(false, true) {
		return 0, errStillAsking
	}
	ctx, cancel := context.WithTimeout(ctx, w.poll)
	defer cancel()
	res := make(chan epochAnswer, 1)
	w.asks.Go(func() {
		a := w.newest1(ctx)
		w.asking.Store(false) // before the answer: the next poll may follow it at once
		res <- a
	})
	select {
	case a := <-res:
		return a.n, a.err
	case <-ctx.Done():
		select {
		case a := <-res: // it returned as its context ended
			return a.n, a.err
		default:
			return 0, fmt.Errorf("no answer within the poll interval %s: %w", w.poll, ctx.Err())
		}
	}
}

type epochAnswer struct {
	n   uint64
	err error
}

// newest1 calls Newest once, recovering a panic as an error.
func (w *Worker) newest1(ctx context.Context) (a epochAnswer) {
	defer func() {
		if v := recover(); v != nil {
			w.panicked("epoch source", v)
			a = epochAnswer{err: fmt.Errorf("panic: %v", v)}
		}
	}()
	n, err := w.epochs.Newest(ctx, w.set.Epoch)
	return epochAnswer{n, err}
}

// pollEpoch asks the epoch source once, bounded by the poll interval, and
// logs what changed: superseded or not, reachable or not. On an error the
// last answer stands.
func (w *Worker) pollEpoch(ctx context.Context) {
	n, err := w.ask(ctx)
	w.epochMu.Lock()
	defer w.epochMu.Unlock()
	if err != nil {
		if !w.epochFailing {
			w.epochFailing = true
			w.log.Warn("lameduck: worker: epoch source unreachable; keeping the last answer",
				"error", err.Error(), "epoch", w.set.Epoch, "newest_epoch", w.newest.Load(), "superseded", w.isSuperseded())
		}
		return
	}
	if w.epochFailing {
		w.epochFailing = false
		w.log.Info("lameduck: worker: epoch source reachable again", "newest_epoch", n)
	}
	w.newest.Store(max(n, w.set.Epoch)) // may fall: the newest runners are gone (a rollback)
	sup := w.isSuperseded()
	if sup == w.superseded.Load() {
		return
	}
	w.superseded.Store(sup)
	close(w.epochMoved) // wakes the loops idling while superseded
	w.epochMoved = make(chan struct{})
	if sup {
		w.log.Warn("lameduck: worker: superseded — a newer rollout epoch exists; /readyz now 503 superseded, the loops stop fetching, a job already delivered is handed back",
			"epoch", w.set.Epoch, "newest_epoch", w.newest.Load(), "mismatch_delay", w.set.EpochMismatchDelay.String())
		return
	}
	w.log.Info("lameduck: worker: no longer superseded — no live runner has a newer epoch (a rollback); the loops fetch again",
		"epoch", w.set.Epoch, "newest_epoch", w.newest.Load())
}
