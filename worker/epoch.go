package worker

import (
	"context"
	"time"
)

// EpochSource reports the newest rollout epoch in a runner fleet
// (docs/runners.md, "Rollout epochs"). Each runner carries the epoch of its
// pod template (Config.Epoch, LAMEDUCK_EPOCH); a runner whose epoch is
// older than the newest one is superseded: its readiness is 503
// "superseded" and every job delivered to it is handed back, delayed by
// Config.EpochMismatchDelay, so that the newer fleet takes it.
//
// Implementations must be safe for concurrent use.
type EpochSource interface {
	// Newest publishes mine, this runner's epoch, and returns the newest
	// epoch of the fleet, mine included: at least mine. On an error the
	// worker keeps its last answer and logs the failure once.
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
func (w *Worker) isSuperseded() bool { return w.newest.Load() > w.cfg.Epoch }

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

// pollEpoch asks the epoch source once, bounded by the poll interval, and
// logs what changed: superseded or not, reachable or not. On an error the
// last answer stands.
func (w *Worker) pollEpoch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.poll)
	defer cancel()
	n, err := w.epochs.Newest(ctx, w.cfg.Epoch)
	w.epochMu.Lock()
	defer w.epochMu.Unlock()
	if err != nil {
		if !w.epochFailing {
			w.epochFailing = true
			w.log.Warn("lameduck: worker: epoch source unreachable; keeping the last answer",
				"error", err.Error(), "epoch", w.cfg.Epoch, "newest_epoch", w.newest.Load(), "superseded", w.isSuperseded())
		}
		return
	}
	if w.epochFailing {
		w.epochFailing = false
		w.log.Info("lameduck: worker: epoch source reachable again", "newest_epoch", n)
	}
	if n > w.newest.Load() {
		w.newest.Store(n)
	}
	if sup := w.isSuperseded(); sup != w.superseded.Load() {
		w.superseded.Store(sup)
		w.log.Warn("lameduck: worker: superseded — a newer rollout epoch exists; /readyz now 503 superseded, every job delivered is handed back",
			"epoch", w.cfg.Epoch, "newest_epoch", w.newest.Load(), "mismatch_delay", w.cfg.EpochMismatchDelay.String())
	}
}
