package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck"
)

// DefaultLivenessFloor is the least time an idle loop may go without
// cycling before liveness calls it stalled, whatever its fetch wait: the
// threshold is max(DefaultLivenessFloor, 20 × the fetch wait), so raising
// the fetch cadence never turns a healthy long poll into a restart
// (docs/runners.md, "Why liveness is not a TCP check").
const DefaultLivenessFloor = 2 * time.Minute

// stallFactor is how many fetch waits an idle loop may go without cycling.
const stallFactor = 20

// Config configures a [Worker].
type Config struct {
	// Lifecycle configures the Lifecycle the worker runs on, with a
	// runner's defaults where the code and the LAMEDUCK_* variables left
	// it unset (docs/runners.md, "Configuration"): probes on ProbeAddr
	// (DefaultProbeAddr, ":9090"); DrainMode DrainComplete (or
	// DrainInterrupt; a server's modes are refused); DrainTimeout, the
	// drain's bound, what LAMEDUCK_TERMINATION_GRACE leaves after the
	// preStop sleep, the teardown and a margin (a tenth of the grace, 2s
	// to 10s), never below 1s (DefaultDrainTimeout, 8h, when the grace is
	// unknown; docs/runners.md, "Sizing terminationGracePeriodSeconds");
	// ShutdownTeardown, when unset too, a third of what the grace leaves
	// after the preStop sleep and the margin, at most 30s (30s inside
	// Kubernetes with the grace unknown): a 30s grace gives a 9s teardown
	// and an 18s drain bound; ShutdownDelay 0 (no Service routes to a
	// runner, so there is no endpoint removal to wait for). Whatever
	// NotReadyAt says, a runner's readiness turns 503 at the signal. Its
	// Extension is the worker's own, set by New and Resolve.
	Lifecycle lameduck.Config
	// Epoch is the runner's rollout epoch, a monotonic generation rendered
	// literally into the pod template; a runner whose epoch is older than
	// the newest in its fleet is superseded (docs/runners.md, "Rollout
	// epochs"). Zero means unset. Env: LAMEDUCK_EPOCH, a non-negative
	// integer. Default 0.
	Epoch uint64
	// EpochMismatchDelay, a time.Duration, is how long a superseded runner
	// delays the redelivery of a job it hands back, so that the newer
	// fleet takes it. Zero means unset; negative is an error.
	// Env: LAMEDUCK_EPOCH_MISMATCH_DELAY. Default DefaultEpochMismatchDelay (2m).
	EpochMismatchDelay time.Duration
	// FetchWait, a time.Duration, is how long a consume loop waits for a
	// job in one fetch, unless the loop sets its own. A loop that has not
	// cycled for max(2m, 20 × its fetch wait) is stalled and fails
	// liveness. Zero means unset; negative is an error.
	// Env: LAMEDUCK_FETCH_WAIT. Default DefaultFetchWait (5s).
	FetchWait time.Duration
	// FailureBackoff, a time.Duration, is how long a job whose handler
	// returned an error (or panicked) waits before the queue delivers it
	// again: FailureBackoff × 2^(delivery−1), delivery read from the job
	// when it is [Delivered] (1 otherwise), at most FailureBackoffMax. The
	// hand-back counts against the queue's delivery limit, so a job that
	// always fails reaches the queue's dead-letter policy, spaced out
	// instead of in a tight loop. Zero means unset; negative is an error.
	// Env: LAMEDUCK_FAILURE_BACKOFF. Default DefaultFailureBackoff (1s).
	FailureBackoff time.Duration
	// FailureBackoffMax, a time.Duration, caps FailureBackoff's doubling.
	// Zero means unset; negative, or below FailureBackoff, is an error.
	// Env: LAMEDUCK_FAILURE_BACKOFF_MAX. Default DefaultFailureBackoffMax (5m).
	FailureBackoffMax time.Duration
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
// each, one at a time; it fetches again only once its job has ended. To run
// n jobs at once, add n loops (distinct names) on the same Source, which must
// then be safe for concurrent use.
type Loop struct {
	// Name identifies the loop in logs and probe bodies ("jobs"). It is
	// unique among a worker's loops.
	Name string
	// Source is the queue. Required.
	Source Source
	// Handle runs one job. Required. It returns nil when the job is done
	// (the loop acknowledges it) or an error (the loop hands it back for
	// redelivery after Config.FailureBackoff, doubled at each delivery:
	// the hand-back counts against the queue's delivery limit). ctx is cancelled when the job must stop: at the
	// signal in DrainInterrupt mode, at the drain bound (DrainTimeout) in
	// DrainComplete mode, with a cause that says which; Handle should then
	// checkpoint and return. A panic is recovered, handed to
	// Config.Lifecycle.OnPanic, and the job handed back.
	Handle func(ctx context.Context, job Job) error
	// FetchWait, a time.Duration, is how long one fetch waits for a job.
	// Zero means Config.FetchWait (LAMEDUCK_FETCH_WAIT, default 5s);
	// negative is an error.
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
	// ErrNotStarted is the hand-back cause of a job delivered as the drain
	// began: it never started.
	ErrNotStarted = errors.New("worker: job delivered as the drain began; not started")
	// ErrSuperseded is the hand-back cause of a job delivered as the
	// runner became superseded (a newer rollout epoch exists): it never
	// started.
	ErrSuperseded = errors.New("worker: runner superseded by a newer rollout epoch")
	// errExit is the cause when Run returns with the job still running.
	errExit = errors.New("worker: the process is exiting")
)

type causeKey struct{}

// HandBackCause returns why a loop hands a job back, read from the ctx the
// loop passes to [Job.HandBack]:
//
//   - nil when the job failed: its handler returned an error, or panicked,
//     with nothing cancelled. Such a hand-back should count against the
//     queue's delivery limit, so a job that always fails ends in the
//     queue's dead-letter policy instead of looping forever;
//   - otherwise the runner's own reason, through no fault of the job's:
//     [ErrNotStarted], [ErrSuperseded], [ErrInterrupted], [ErrDrainBound],
//     or an error saying the process is exiting. Such a hand-back must
//     leave the job deliverable whatever the queue's delivery limit: a job
//     at its last delivery is given a fresh one (re-published, say) rather
//     than NAKed into the dead-letter path, or every rollout would spend one
//     of its deliveries.
//
// docs/runners.md, "Hand-backs and delivery limits", says how the demo
// worker does it on JetStream.
func HandBackCause(ctx context.Context) error {
	err, _ := ctx.Value(causeKey{}).(error)
	return err
}

// Worker runs consume loops on a [lameduck.Lifecycle] and makes the
// Lifecycle's probes tell their truth (docs/runners.md):
//
//   - /healthz: 200 while every loop is busy with a job (however long) or
//     cycling, an idle cycle being a fetch that returned or timed out; 503
//     {"status":"stalled","loop":"jobs","idle_for":"7m12s",...} when an idle
//     loop has not cycled for max(2m, 20 × its fetch wait). Always 200 once
//     the drain has begun;
//   - /readyz: 503 "starting" until every loop has cycled once, or its
//     Source has said it is consuming ([Consuming]); 503
//     "superseded" while a newer rollout epoch exists; the Lifecycle's
//     checks otherwise (200 "ok"); 503 {"status":"draining","busy":true}
//     from the signal on, busy while a job is in flight.
//
// On the signal no loop asks for a new job; a fetch already under way is
// waited for, never cancelled (a queue cannot un-send a job), and a job it
// returns is handed back unstarted ([ErrNotStarted]). In DrainComplete mode
// the jobs in flight finish, bounded by DrainTimeout, at which their
// contexts are cancelled and each is logged with its age; in
// DrainInterrupt mode their contexts are cancelled at once. A job whose
// handler returns an error is handed back (for the runner's reason when the
// runner cancelled it, for its own failure otherwise, after the failure
// backoff); one that returns nil is acknowledged, even after its context
// was cancelled, and the log says so. Once every loop has returned, each
// Source that is a [Drainer] is drained within the teardown's hook share. A handler that has
// not returned when the teardown's hook share ends (Config.HookShare of
// ShutdownTeardown) has its job handed back there, while it still runs, so
// the job never waits for the queue's ack deadline; its late return then
// settles nothing.
//
// Whether a job is in flight never depends on its ID: a job whose ID is
// empty (or panics) is named in logs <loop>#<n>, n its delivery's number in
// the loop.
//
// Create one with [New]; the zero value is not usable. Its methods are safe
// for concurrent use. It runs once.
type Worker struct {
	lc     *lameduck.Lifecycle
	cfg    lameduck.Config // resolved
	set    *settings       // resolved
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

	stopCtx   context.Context // cancelled at the signal: the loops stop asking for jobs
	stopFetch context.CancelFunc
	exitCtx   context.Context // cancelled at the end of the teardown's hook share, or when Run returns: what Fetch gets
	exit      context.CancelCauseFunc
	pollCtx   context.Context // cancelled when Run returns
	stopPoll  context.CancelFunc
	exited    chan struct{}  // closed when every loop goroutine has returned
	poller    sync.WaitGroup // the epoch poller and the signal's watcher
	asks      sync.WaitGroup // calls of Epochs.Newest, each in a goroutine of its own
	asking    atomic.Bool    // a call of Epochs.Newest is running (a wedged one is not piled on)
	cut       atomic.Int32   // jobs cut at the drain bound

	mu      sync.Mutex
	loops   []*loop // guarded by mu; fixed once Run is called
	ran     bool    // guarded by mu: Run was called
	started bool    // guarded by mu: the loops started
}

// New returns a Worker on a new Lifecycle configured by cfg.Lifecycle as a
// runner's (see Config and [Resolve]). It returns an error for a negative
// EpochPoll or LivenessFloor, or the Lifecycle's error: one
// *lameduck.ConfigError per bad setting, each naming the setting, its
// value and the fix.
// Nothing is bound and no goroutine started until Run.
func New(cfg Config) (*Worker, error) {
	if errs := cfg.checkOwn(); len(errs) > 0 {
		return nil, errs[0]
	}
	w := &Worker{
		set:    cfg.settings(),
		epochs: cfg.Epochs,
		poll:   cfg.EpochPoll,
		floor:  cfg.LivenessFloor,
		exited: make(chan struct{}),

		epochMoved: make(chan struct{}),
	}
	lcfg := cfg.Lifecycle
	lcfg.Extension = w.set.extension(w) // w's hooks are called from Run on
	lc, err := lameduck.New(lcfg)
	if err != nil {
		return nil, err
	}
	if errs := w.set.check(lc.Config().EnvPrefix); len(errs) > 0 {
		return nil, errs[0]
	}
	w.lc, w.cfg = lc, lc.Config()
	w.clock, w.log = w.cfg.Clock, w.cfg.Logger
	if w.epochs == nil {
		w.epochs = StaticEpochs(0)
	}
	if w.poll == 0 {
		w.poll = DefaultEpochPoll
	}
	if w.floor == 0 {
		w.floor = DefaultLivenessFloor
	}
	w.newest.Store(w.set.Epoch)
	w.stopCtx, w.stopFetch = context.WithCancel(context.Background())
	w.exitCtx, w.exit = context.WithCancelCause(context.Background())
	w.pollCtx, w.stopPoll = context.WithCancel(context.Background())
	if err := lc.AddTeardownHook("consume loops", w.joinLoops); err != nil {
		return nil, err
	}
	return w, nil
}

// Epoch returns this runner's rollout epoch, resolved: Config.Epoch, or
// LAMEDUCK_EPOCH, or 0. It never changes.
func (w *Worker) Epoch() uint64 { return w.set.Epoch }

// Lifecycle returns the Lifecycle the worker runs on, to add readiness
// checks (they apply while the runner serves), closers and background work.
func (w *Worker) Lifecycle() *lameduck.Lifecycle { return w.lc }

// errAlreadyRunning is AddLoop's and Run's answer once Run has been
// called.
var errAlreadyRunning = errors.New("lameduck: the worker is already running")

// AddLoop registers a consume loop; it starts when Run has bound the probe
// listener and every startup task has returned. It returns an error for a
// missing name, Source or Handle, a duplicate name or a negative FetchWait,
// and one once Run has been called.
func (w *Worker) AddLoop(l Loop) error {
	switch {
	case l.Name == "" || l.Source == nil || l.Handle == nil:
		return fmt.Errorf("lameduck: worker.AddLoop(%q): a name, a Source and a Handle are all required", l.Name)
	case l.FetchWait < 0:
		return fmt.Errorf("lameduck: worker.AddLoop(%q): FetchWait=%s must not be negative; use 0 for %s", l.Name, l.FetchWait, w.set.FetchWait)
	}
	if l.FetchWait == 0 {
		l.FetchWait = w.set.FetchWait
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ran {
		return errAlreadyRunning
	}
	for _, o := range w.loops {
		if o.Name == l.Name {
			return fmt.Errorf("lameduck: worker.AddLoop(%q): a loop of that name already exists", l.Name)
		}
	}
	lp := &loop{Loop: l, w: w, threshold: max(w.floor, stallFactor*l.FetchWait), cycled: make(chan struct{})}
	lp.fetchCtx = context.WithValue(context.WithValue(w.exitCtx, consumingKey{}, lp.markConsuming), stoppingKey{}, w.stopCtx.Done())
	w.loops = append(w.loops, lp)
	return nil
}

// jobsInFlight counts the loops running a job.
func (w *Worker) jobsInFlight() int {
	w.mu.Lock()
	loops := w.loops
	w.mu.Unlock()
	n := 0
	for _, l := range loops {
		if _, _, ok := l.busy(); ok {
			n++
		}
	}
	return n
}

// exitWait bounds Run's wait, after the Lifecycle's sequence, for the loops
// and the epoch source's calls to return.
const exitWait = time.Second

// Run runs the Lifecycle (see lameduck.Lifecycle.Run) with the loops, in
// order:
//
//  1. the probe listener is bound and the Lifecycle's startup tasks run,
//     in the order they were added; the loops start only when every one
//     of them has returned, so no job is handled while the runner is
//     starting; /readyz turns 200 when each loop has cycled once;
//  2. the signal drains the loops as [Worker] describes;
//  3. once the sequence has finished, Run waits up to 1s for the loops
//     and the epoch source: a handler or an EpochSource that ignores its
//     context past then is named in the log and left behind.
//
// Run returns the Lifecycle's error, joined with an error wrapping
// [ErrDrainBound] when a job cut at the drain bound was handed back (so the
// process exits non-zero: the job did not finish here; a job whose handler
// returned nil after the bound was acknowledged and does not count). Run runs once: a second call
// returns an error saying it is already running at once and changes
// nothing, and so does a call after the Lifecycle's own Run was called (run a worker with
// Worker.Run, never with its Lifecycle's).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.ran {
		w.mu.Unlock()
		return errAlreadyRunning
	}
	w.ran = true
	w.mu.Unlock()
	// Registered last, so it runs after every startup task the
	// application added (a migration ends before the first job).
	if err := w.lc.AddStartupTask("consume loops", w.start); err != nil {
		return err
	}
	err := w.lc.Run(ctx)
	w.stopFetch()
	w.exit(errExit)
	w.stopPoll()
	w.poller.Wait() // never inside Newest: see ask
	w.mu.Lock()
	loops, started := w.loops, w.started
	w.mu.Unlock()
	for _, l := range loops {
		l.cancelJob(errExit)
	}
	asked := make(chan struct{})
	go func(done chan struct{}) { w.asks.Wait(); close(done) }(asked) // returns once a wedged Newest does; see ask
	exited := w.exited
	if !started {
		exited = nil
	}
	t := w.clock.NewTimer(exitWait)
	defer t.Stop()
	for exited != nil || asked != nil {
		select {
		case <-exited:
			exited = nil
		case <-asked:
			asked = nil
		case <-t.C():
			for _, l := range loops {
				if id, age, busy := l.busy(); busy && exited != nil {
					if l.settlingNow() {
						w.log.Error("lameduck: worker: job's Ack or HandBack still running at exit; the queue's client ignored its context, and the queue redelivers the job when its own clock says so (ack wait, lease)",
							"loop", l.Name, "job", id, "age", age.Round(time.Millisecond).String())
						continue
					}
					w.log.Error("lameduck: worker: job still running at exit; its handler ignored its context",
						"loop", l.Name, "job", id, "age", age.Round(time.Millisecond).String())
				}
			}
			if asked != nil {
				w.log.Error("lameduck: worker: the epoch source's Newest still running at exit; it ignored its context")
			}
			exited, asked = nil, nil
		}
	}
	if n := w.cut.Load(); n > 0 {
		cut := fmt.Errorf("lameduck: worker: %d job(s) cut at the drain bound %s and handed back: %w", n, w.cfg.DrainTimeout, ErrDrainBound)
		w.log.Error(cut.Error()+"; exiting non-zero", "setting", w.cfg.EnvPrefix+"DRAIN_TIMEOUT")
		err = errors.Join(err, cut)
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

// drain is the drain wait: the loops stop asking for jobs (a fetch under
// way is waited for, never cancelled: its job is handed back unstarted); in
// interrupt mode the jobs in flight are asked to stop at once; it returns
// when every loop has returned, or at the bound, where it asks what still
// runs to stop.
func (w *Worker) drain(ctx context.Context) error {
	w.stopFetch()
	w.mu.Lock()
	loops, started := w.loops, w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	if w.cfg.DrainMode == DrainInterrupt {
		for _, l := range loops {
			if id, age, busy := l.busy(); busy {
				w.log.Info("lameduck: worker: interrupting the job in flight (drain mode interrupt): its handler is asked to stop; the job is handed back, or acknowledged if the handler returns nil (a line follows)",
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
	cut := 0
	for _, l := range loops {
		if id, age, busy := l.busy(); busy {
			w.log.Warn(fmt.Sprintf("lameduck: worker: drain bound %s reached: cancelling job %s of loop %s (age %s); it is handed back unless its handler returns nil (a line follows)",
				w.cfg.DrainTimeout, id, l.Name, age.Round(time.Millisecond)),
				"loop", l.Name, "job", id, "age", age.Round(time.Millisecond).String(),
				"setting", w.cfg.EnvPrefix+"DRAIN_TIMEOUT")
			l.cancelJob(ErrDrainBound)
			cut++
		}
	}
	if cut == 0 {
		w.log.Warn(fmt.Sprintf("lameduck: worker: drain bound %s reached with no job in flight: a fetch under way still holds a loop; it is not cancelled and ends at the teardown's hook share at the latest (anything it returns late is handed back)",
			w.cfg.DrainTimeout), "setting", w.cfg.EnvPrefix+"DRAIN_TIMEOUT")
	}
	return nil // each job cut is named above, once
}

// joinLoops is the teardown hook: it waits, within the teardown's hook share,
// for the loops to return (a job cancelled at the bound handed back, a fetch
// under way answered), then drains each Source that is a [Drainer]. At the
// share's end it hands back itself each job whose handler has not returned,
// ends the fetch context, so a Fetch still waiting returns (its Source
// hands back what the queue delivers late), and drains the Sources all the
// same, for at most 5s more: what a Source holds goes back even when a
// handler overran.
func (w *Worker) joinLoops(ctx context.Context) error {
	w.mu.Lock()
	loops, started := w.loops, w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.exited:
		return w.drainSources(ctx, loops)
	case <-ctx.Done():
	}
	for _, l := range loops {
		l.giveUp()
	}
	w.exit(errExit)
	// The loops that are not stuck return now; a Source still holds what
	// it buffered or received late (a prefetched delivery, a job that
	// reached a request given up on), which must go back even though a
	// handler overran: drain the Sources, bounded.
	dctx, cancel := context.WithTimeout(context.Background(), giveUpSettle)
	defer cancel()
	_ = w.drainSources(dctx, loops) // each error is logged there
	return ctx.Err()
}

// drainSources calls Drain once on each distinct Source that is a
// [Drainer], in the order of the loops, and returns their errors joined.
// Each error is logged, with the Source's own words.
func (w *Worker) drainSources(ctx context.Context, loops []*loop) error {
	var done []Source
	var errs []error
	for _, l := range loops {
		d, ok := l.Source.(Drainer)
		if !ok || seen(done, l.Source) {
			continue
		}
		done = append(done, l.Source)
		if err := w.drainSource(ctx, d); err != nil {
			w.log.Error("lameduck: worker: draining the loop's job source left something to the queue", "loop", l.Name, "error", err.Error())
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drainSource calls d.Drain, recovering a panic as an error.
func (w *Worker) drainSource(ctx context.Context, d Drainer) (err error) {
	defer func() {
		if v := recover(); v != nil {
			w.panicked("drain source", v)
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return d.Drain(ctx)
}

// seen reports whether s is in list; a Source of a type that cannot be
// compared is never seen twice.
func seen(list []Source, s Source) bool {
	if !reflect.TypeOf(s).Comparable() {
		return false
	}
	for _, o := range list {
		if reflect.TypeOf(o) == reflect.TypeOf(s) && o == s {
			return true
		}
	}
	return false
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
