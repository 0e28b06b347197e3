package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck"
)

// DefaultLivenessFloor is the least time an idle loop may go without
// cycling before liveness calls it stalled, whatever its fetch wait: the
// threshold is max(DefaultLivenessFloor, 20 × the fetch wait), so raising
// the fetch cadence never turns a healthy long poll into a restart
// (docs/runners.md, "Liveness").
const DefaultLivenessFloor = 2 * time.Minute

// stallFactor is how many fetch waits an idle loop may go without cycling.
const stallFactor = 20

// Config configures a [Worker].
type Config struct {
	// Lifecycle configures the Lifecycle the worker runs on; New sets its
	// Runner field, so the runner's defaults and settings apply: probes on
	// ProbeAddr (":9090"), DrainMode DrainComplete or DrainInterrupt,
	// DrainTimeout 8h, Epoch, EpochMismatchDelay, FetchWait, all from
	// LAMEDUCK_* variables when unset (see lameduck.Config).
	Lifecycle lameduck.Config
	// Epochs reports the newest rollout epoch of the fleet. Nil means
	// StaticEpochs(0): this runner is never superseded.
	Epochs EpochSource
	// EpochPoll, a time.Duration, is how often Epochs is asked, each
	// question bounded by the same duration. Zero means DefaultEpochPoll
	// (10s); negative is an error.
	EpochPoll time.Duration
	// LivenessFloor, a time.Duration, replaces DefaultLivenessFloor (2m)
	// in the stall threshold max(floor, 20 × fetch wait). Zero means the
	// default; negative is an error. Lower it only to test a stall quickly.
	LivenessFloor time.Duration
}

// Loop is one consume loop: it fetches jobs from Source and runs Handle on
// each, one at a time.
type Loop struct {
	// Name identifies the loop in logs and probe bodies ("jobs"). It is
	// unique among a worker's loops.
	Name string
	// Source is the queue. Required.
	Source Source
	// Handle runs one job. Required. It returns nil when the job is done
	// (the loop acknowledges it) or an error (the loop hands it back for
	// redelivery at once). ctx is cancelled when the job must stop: at the
	// signal in DrainInterrupt mode, at the drain bound (DrainTimeout) in
	// DrainComplete mode, with a cause that says which; Handle should then
	// checkpoint and return. A panic is recovered, handed to
	// Config.Lifecycle.OnPanic, and the job handed back.
	Handle func(ctx context.Context, job Job) error
	// FetchWait, a time.Duration, is how long one fetch waits for a job.
	// Zero means the Lifecycle's FetchWait (LAMEDUCK_FETCH_WAIT, default
	// 5s); negative is an error.
	FetchWait time.Duration
}

// Causes of a job's cancellation, read with context.Cause.
var (
	// ErrInterrupted is the cause when the drain mode is DrainInterrupt and
	// the shutdown sequence began.
	ErrInterrupted = errors.New("worker: job interrupted by the drain (mode interrupt)")
	// ErrDrainBound is the cause when the drain bound (DrainTimeout)
	// passed with the job still running.
	ErrDrainBound = errors.New("worker: job cancelled at the drain bound")
	// errExit is the cause when Run returns with the job still running.
	errExit = errors.New("worker: the process is exiting")
)

// Worker runs consume loops on a [lameduck.Lifecycle] and makes the
// Lifecycle's probes tell their truth (docs/runners.md):
//
//   - /healthz: 200 while every loop is busy with a job (however long) or
//     cycling, an idle cycle being a fetch that returned or timed out; 503
//     {"status":"stalled","loop":"jobs","idle_for":"7m12s",...} when an idle
//     loop has not cycled for max(2m, 20 × its fetch wait). Always 200 once
//     the drain has begun;
//   - /readyz: 503 "starting" until every loop has cycled once; 503
//     "superseded" while a newer rollout epoch exists; the Lifecycle's
//     checks otherwise (200 "ok"); 503 {"status":"draining","busy":true}
//     from the signal on, busy while a job is in flight.
//
// On the signal no loop takes a new job. In DrainComplete mode the jobs in
// flight finish, bounded by DrainTimeout, at which their contexts are
// cancelled and each is logged with its age; in DrainInterrupt mode their
// contexts are cancelled at once. A job whose handler returns an error is
// handed back; one that returns nil is acknowledged.
//
// Create one with [New]; the zero value is not usable. Its methods are safe
// for concurrent use. It runs once.
type Worker struct {
	lc     *lameduck.Lifecycle
	cfg    lameduck.Config // resolved
	clock  lameduck.Clock
	log    *slog.Logger
	epochs EpochSource
	poll   time.Duration
	floor  time.Duration

	newest     atomic.Uint64 // newest epoch of the live fleet, as last answered; falls after a rollback
	superseded atomic.Bool   // newest > cfg.Epoch, as last logged

	epochMu      sync.Mutex    // serialises pollEpoch's logging and epochMoved's swap
	epochFailing bool          // guarded by epochMu: the last question failed
	epochMoved   chan struct{} // guarded by epochMu: closed (and replaced) when superseded changes

	fetchCtx  context.Context // cancelled at the signal: no new job
	stopFetch context.CancelFunc
	pollCtx   context.Context // cancelled when Run returns
	stopPoll  context.CancelFunc
	exited    chan struct{}  // closed when every loop goroutine has returned
	poller    sync.WaitGroup // the epoch poller and the signal's watcher

	mu      sync.Mutex
	loops   []*loop // guarded by mu; fixed once started
	started bool    // guarded by mu
}

// New returns a Worker on a new Lifecycle configured by cfg.Lifecycle with
// Runner set. It returns the Lifecycle's error (wrapping
// lameduck.ErrInvalidConfig, naming the setting, its value and the fix) or
// an error for a negative EpochPoll or LivenessFloor. Nothing is bound and
// no goroutine started until Run.
func New(cfg Config) (*Worker, error) {
	if cfg.EpochPoll < 0 {
		return nil, fmt.Errorf("lameduck: worker.Config.EpochPoll=%s: must not be negative; use 0 for the default %s: %w",
			cfg.EpochPoll, DefaultEpochPoll, lameduck.ErrInvalidConfig)
	}
	if cfg.LivenessFloor < 0 {
		return nil, fmt.Errorf("lameduck: worker.Config.LivenessFloor=%s: must not be negative; use 0 for the default %s: %w",
			cfg.LivenessFloor, DefaultLivenessFloor, lameduck.ErrInvalidConfig)
	}
	lcfg := cfg.Lifecycle
	lcfg.Runner = true
	lc, err := lameduck.New(lcfg)
	if err != nil {
		return nil, err
	}
	rc := lc.Config()
	w := &Worker{
		lc:     lc,
		cfg:    rc,
		clock:  rc.Clock,
		log:    rc.Logger,
		epochs: cfg.Epochs,
		poll:   cfg.EpochPoll,
		floor:  cfg.LivenessFloor,
		exited: make(chan struct{}),

		epochMoved: make(chan struct{}),
	}
	if w.epochs == nil {
		w.epochs = StaticEpochs(0)
	}
	if w.poll == 0 {
		w.poll = DefaultEpochPoll
	}
	if w.floor == 0 {
		w.floor = DefaultLivenessFloor
	}
	w.newest.Store(rc.Epoch)
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	w.pollCtx, w.stopPoll = context.WithCancel(context.Background())
	err = errors.Join(
		lc.AnswerProbes(w.answer),
		lc.AddStartupTask("consume loops", w.start),
		lc.AddDrainWait("jobs in flight", w.drain),
		lc.AddDrainHook("consume loops", w.joinLoops),
	)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Lifecycle returns the Lifecycle the worker runs on, to add readiness
// checks (they apply while the runner serves), closers and background work.
func (w *Worker) Lifecycle() *lameduck.Lifecycle { return w.lc }

// AddLoop registers a consume loop; it starts when Run has bound the probe
// listener. It returns an error for a missing name, Source or Handle, a
// duplicate name or a negative FetchWait, and lameduck.ErrAlreadyRunning
// once Run has started.
func (w *Worker) AddLoop(l Loop) error {
	switch {
	case l.Name == "" || l.Source == nil || l.Handle == nil:
		return fmt.Errorf("lameduck: worker.AddLoop(%q): a name, a Source and a Handle are all required", l.Name)
	case l.FetchWait < 0:
		return fmt.Errorf("lameduck: worker.AddLoop(%q): FetchWait=%s must not be negative; use 0 for %s", l.Name, l.FetchWait, w.cfg.FetchWait)
	}
	if l.FetchWait == 0 {
		l.FetchWait = w.cfg.FetchWait
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return lameduck.ErrAlreadyRunning
	}
	for _, o := range w.loops {
		if o.Name == l.Name {
			return fmt.Errorf("lameduck: worker.AddLoop(%q): a loop of that name already exists", l.Name)
		}
	}
	w.loops = append(w.loops, &loop{Loop: l, w: w, threshold: max(w.floor, stallFactor*l.FetchWait), cycled: make(chan struct{})})
	return nil
}

// Run runs the Lifecycle (see lameduck.Lifecycle.Run) with the loops: the
// probe listener is bound, the loops start and /readyz turns 200 when each
// has cycled once; the signal drains them as [Worker] describes. Run
// returns the Lifecycle's error when the sequence has finished and the
// loops have returned; a loop whose handler ignores its context past the
// end is named in the log and left behind.
func (w *Worker) Run(ctx context.Context) error {
	err := w.lc.Run(ctx)
	w.stopFetch()
	w.stopPoll()
	w.poller.Wait()
	w.mu.Lock()
	loops, started := w.loops, w.started
	w.mu.Unlock()
	for _, l := range loops {
		l.cancelJob(errExit)
	}
	if started {
		t := w.clock.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-w.exited:
		case <-t.C():
			for _, l := range loops {
				if id, age, busy := l.busy(); busy {
					w.log.Error("lameduck: worker: job still running at exit; its handler ignored its context",
						"loop", l.Name, "job", id, "age", age.Round(time.Millisecond).String())
				}
			}
		}
	}
	return err
}

// start is the startup task: it asks the epoch source once, starts the
// epoch poller and the loops, and returns when every loop has cycled once.
func (w *Worker) start(ctx context.Context) error {
	w.mu.Lock()
	w.started = true
	loops := w.loops
	w.mu.Unlock()
	w.pollEpoch(ctx)
	w.poller.Go(w.pollLoop)
	w.poller.Go(func() { // no new job from the signal on, whatever Run is doing
		select {
		case <-w.lc.Events().ShutdownInitiated.Done():
			w.stopFetch()
		case <-w.pollCtx.Done():
		}
	})
	var loopsWG sync.WaitGroup
	for _, l := range loops {
		loopsWG.Go(l.run)
	}
	go func() { loopsWG.Wait(); close(w.exited) }() // joined through exited
	if len(loops) == 0 {
		w.log.Warn("lameduck: worker has no consume loop; liveness and readiness watch nothing")
	}
	for _, l := range loops {
		select {
		case <-l.cycled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// drain is the drain wait: no new job from now on; in interrupt mode the
// jobs in flight are cancelled at once; it returns when every loop has
// returned, or at the bound, where it cancels what still runs.
func (w *Worker) drain(ctx context.Context) error {
	w.stopFetch()
	w.mu.Lock()
	loops, started := w.loops, w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	if w.cfg.DrainMode == lameduck.DrainInterrupt {
		for _, l := range loops {
			if id, age, busy := l.busy(); busy {
				w.log.Info("lameduck: worker: interrupting the job in flight (drain mode interrupt); it will be handed back",
					"loop", l.Name, "job", id, "age", age.Round(time.Millisecond).String())
				l.cancelJob(ErrInterrupted)
			}
		}
	}
	select {
	case <-w.exited:
		return nil
	case <-ctx.Done():
	}
	for _, l := range loops {
		if id, age, busy := l.busy(); busy {
			w.log.Warn(fmt.Sprintf("lameduck: worker: drain bound %s reached: cancelling job %s of loop %s (age %s); it will be handed back",
				w.cfg.DrainTimeout, id, l.Name, age.Round(time.Second)),
				"loop", l.Name, "job", id, "age", age.Round(time.Millisecond).String(),
				"setting", w.cfg.EnvPrefix+"DRAIN_TIMEOUT")
			l.cancelJob(ErrDrainBound)
		}
	}
	return nil // each job cut is named above, once
}

// joinLoops is the drain hook: it waits, within the teardown's hook share,
// for the loops cancelled at the bound to hand their jobs back.
func (w *Worker) joinLoops(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d on the worker's clock, or until ctx is done.
func (w *Worker) sleep(ctx context.Context, d time.Duration) {
	t := w.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}
