package lameduck

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/grace"
)

// Lifecycle takes a Go service through its life in Kubernetes: it binds the
// registered servers, answers the liveness, readiness and startup probes
// truthfully, runs startup tasks, and on SIGTERM (or SIGINT, GET /prestop,
// BeginShutdown, or the cancellation of Run's context) runs the shutdown
// sequence: readiness 503 at once, the lame-duck window, then teardown under
// one budget. [Events] defines its timeline, step by step.
//
// Create one with [New]; the zero value is not usable. A Lifecycle runs
// once. All methods are safe for concurrent use.
type Lifecycle struct {
	cfg     Config       // resolved; immutable after New
	budget  grace.Budget // cfg's grace-period arithmetic; immutable after New
	log     *slog.Logger
	clock   Clock
	events  *Events
	phase   atomic.Int32 // a Phase; only moves forward
	state   atomic.Int32 // what the middleware does: serving, draining or rejecting
	closing atomic.Bool  // teardown closed the listeners: Serve's accept error is expected
	track   *tracker
	shared  *probeHandler // the probes of the application's listeners
	probes  http.Handler  // shared, as ProbeHandler returns it (counted for OnTransition)
	checks  *health.Checker
	// refreshChecks is set once a check with Refresh is added: while the
	// pod serves, Checker.RunRefresh then runs (see startRefresh).
	refreshChecks atomic.Bool
	refreshWG     sync.WaitGroup // the refresh goroutine; Add only under mu, before the sequence starts
	exit          func(code int) // os.Exit; replaced by in-package tests
	startCx       context.Context
	cancel        context.CancelFunc // cancels startCx and loopCtx: at the signal
	loopCtx       context.Context    // the context of GoLoop tasks
	bg            *registry
	unprobed      atomic.Bool // Run bound no listener: nothing serves the probes

	tokenSet     bool         // Config.PreStopToken is set
	tokenSum     [32]byte     // its SHA-256 digest; the token itself is never compared
	refused      atomic.Int64 // /prestop calls refused since the last log line
	refusedLogAt atomic.Int64 // clock time (UnixNano) of that line; 0 before the first
	maint        maintenance  // the maintenance switch's state (maintenance.go)

	mu         sync.Mutex
	servers    []*server     // guarded by mu
	startup    []startupTask // guarded by mu
	hooks      []namedFunc   // teardown hooks, in order; guarded by mu
	waits      []namedFunc   // drain waits, an extension's (a runner's jobs); guarded by mu
	closers    []namedFunc   // closers, in order of registration; guarded by mu
	running    bool          // guarded by mu: Run has been called
	initiated  bool          // guarded by mu: the sequence has started
	skipWindow bool          // guarded by mu: it started before the pod was ever ready
	bySignal   bool          // guarded by mu: a signal started it
	reason     string        // guarded by mu: what started it
	refreshing bool          // guarded by mu: the refresh goroutine runs
	refreshAll bool          // guarded by mu: a Refresh check was added while it runs: look again before it ends
	// strayStartup is the startup task the boot's budget left running;
	// guarded by mu.
	strayStartup *strayTask
}

// New returns a Lifecycle configured by cfg, filled from the environment and
// the defaults as [Config] describes.
//
// It returns an error joining one [*ConfigError] per bad setting, each
// naming the setting, its value and the fix; nothing is bound and no
// goroutine is started, so a caller can exit non-zero before listening.
func New(cfg Config) (*Lifecycle, error) {
	res, errs := Resolve(cfg)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cfg = res.Config
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lifecycle{
		cfg:     cfg,
		budget:  res.Config.budget(res.Sources),
		log:     cfg.Logger,
		clock:   cfg.Clock,
		events:  newEvents(cfg.Clock, nil),
		track:   newTracker(cfg.Clock),
		exit:    os.Exit,
		startCx: ctx,
		cancel:  cancel,
		loopCtx: ctx,
		bg:      newRegistry(),
	}
	var onResult func(health.Result)
	if cfg.OnTransition != nil {
		l.events = newEvents(cfg.Clock, l.eventFired)
		onResult = func(r health.Result) {
			l.transition(Transition{Kind: TransitionCheck, At: r.Time, Check: r})
		}
	}
	l.checks = health.NewChecker(health.CheckerOptions{
		OnResult:       onResult,
		DefaultTimeout: cfg.CheckTimeout,
		DefaultMaxAge:  cfg.CheckMaxAge,
		Logger:         cfg.Logger, // bodies hide details per listener (probeHandler)
		OnPanic: func(check string, v any, stack []byte) {
			if cfg.OnPanic != nil {
				cfg.OnPanic("check "+check, v, stack)
			}
		},
	})
	if cfg.Extension != nil {
		for _, w := range cfg.Extension.Waits {
			l.waits = append(l.waits, namedFunc{w.Name, w.Fn})
		}
	}
	if cfg.PreStopToken != "" {
		l.tokenSet, l.tokenSum = true, sha256.Sum256([]byte(cfg.PreStopToken))
	}
	l.shared = l.newProbeHandler(true)
	l.probes = l.countProbes(l.shared)
	if cfg.ProbeAddr != "" {
		l.servers = append(l.servers, &server{srv: l.newProbeServer(), probes: true})
	}
	return l, nil
}

// Config returns the resolved configuration: every field filled from the
// code, the environment or the defaults. ShutdownDelay is NoDelay when the
// window is zero.
func (l *Lifecycle) Config() Config { return l.cfg }

// Phase returns the current phase.
func (l *Lifecycle) Phase() Phase { return Phase(l.phase.Load()) }

// Events returns the Lifecycle's one-shot events, for handlers and tests to
// wait on.
func (l *Lifecycle) Events() *Events { return l.events }

// BeginShutdown starts the shutdown sequence, as SIGTERM would, and returns
// at once; Run carries the sequence out. reason is written in the log.
//
// It reports whether this call started the sequence; a later call (or
// signal) changes nothing. It may be called before Run, in which case Run
// binds, then runs the sequence straight away.
func (l *Lifecycle) BeginShutdown(reason string) bool {
	return l.begin(reason, false)
}

// begin flips readiness and fires ShutdownInitiated, once.
func (l *Lifecycle) begin(reason string, bySignal bool) bool {
	l.mu.Lock()
	if l.initiated {
		l.mu.Unlock()
		return false
	}
	l.initiated, l.bySignal, l.reason = true, bySignal, reason
	// The start is known before anyone can learn that the sequence has
	// started (a begin that loses reads it at once), even while the line
	// below is being written.
	l.events.ShutdownInitiated.stamp()
	// Loops are refused before readiness flips: whoever sees /readyz 503
	// and then asks for a loop must be refused (GoLoop's promise).
	l.bg.refuseLoops()
	var was Phase
	for {
		p := l.phase.Load()
		if p >= int32(PhaseDraining) || l.phase.CompareAndSwap(p, int32(PhaseDraining)) {
			was = Phase(p)
			break
		}
	}
	// A pod that never became ready is in no endpoint: nothing to wait for.
	l.skipWindow = was == PhaseStarting
	skip := l.skipWindow
	l.mu.Unlock()
	// Hand keep-alive clients over: from now on every response carries
	// Connection: close (HTTP/2: GOAWAY), so clients reconnect and land,
	// once endpoints have caught up, on another pod. Idle connections are
	// not closed here: a client may be sending on one this very instant,
	// and a POST it cannot replay would fail (Server.SetKeepAlivesEnabled's
	// race). They close at the end of the window, when routing has moved on.
	l.state.Store(stateDraining)
	l.armLate(skip)
	l.track.stampEnds.Store(true)
	// Readiness is 503 from here on; the log line comes before anything
	// else of the sequence can happen.
	w := l.window()
	flip, stays := " — /readyz now 503,", " — /readyz stays 503;"
	if l.readyInWindow() {
		flip = " — /readyz stays 200 until the teardown (" + l.cfg.EnvPrefix + "NOT_READY_AT=teardown),"
	}
	if l.unprobed.Load() { // nothing serves /readyz: do not claim it answers
		flip, stays = " —", " —"
	}
	msg := fmt.Sprintf("lameduck: draining%s waiting %s for endpoint removal", flip, w)
	switch {
	case l.cfg.Extension != nil && l.cfg.Extension.Draining != nil:
		// A runner's window is held open by its jobs, up to its bound: the
		// bound is the window, as the startup budget line says.
		w = l.cfg.maxWindow()
		msg = l.cfg.Extension.Draining(flip, w)
	case skip:
		msg = "lameduck: draining" + stays + " the pod never became ready, so no lame-duck window"
	case l.cfg.DrainMode == DrainIdle:
		msg = fmt.Sprintf("lameduck: draining%s waiting for traffic to stop for %s (at least %s, at most %s)",
			flip, l.cfg.IdleWindow, w, l.cfg.DrainTimeout)
	}
	l.log.Info(msg, "reason", reason, "window", w.String(), "teardown", l.cfg.ShutdownTeardown.String(),
		"in_flight", l.inFlight())
	l.events.ShutdownInitiated.fire()
	l.cancel()
	return true
}

// Run serves until the shutdown sequence has finished. Its steps, in order:
//
//  1. log the configuration and the shutdown budget (against
//     Config.TerminationGrace when set, with a warning when it does not fit);
//  2. bind every registered server; if one cannot bind, close the others and
//     return the error at once, before any request is served;
//  3. serve, with the probes answering; run the startup tasks; then the
//     phase becomes serving;
//  4. wait for SIGTERM or SIGINT, GET /prestop, BeginShutdown, the
//     cancellation of ctx, or a server that stops with an error;
//  5. run the shutdown sequence, whose timeline [Events] defines:
//     readiness 503, the lame-duck window, teardown (hooks beside the HTTP
//     drain, the join, the closers).
//
// Run returns only when the sequence has finished, never early on
// http.ErrServerClosed. It returns nil after a clean drain; an error wrapping
// context.DeadlineExceeded when the teardown budget ran out and requests
// were cut, a teardown hook overran its share, or background work was still
// running at the join's bound (abandoned at exit); an error wrapping
// ErrStartupFailed when a startup task failed (after its tries);
// the bind or serve error otherwise. Run logs every error it returns, so a
// caller need only set the exit code. From the start of the sequence to the
// return takes at most the window (ShutdownDelay, or DrainTimeout in
// DrainIdle mode) + ShutdownTeardown, whatever handlers do.
//
// Unlike http.Server.Shutdown alone, the teardown waits for hijacked
// connections (WebSockets) too, as long as their handler runs, and closes
// them at the budget. Run does not wait for a handler that keeps running
// after its connection was closed by force, nor for a readiness check's
// ping that ignores its context (it names such pings in the log). A second
// signal does not shorten the sequence unless Config.ExitOnSecondSignal is
// set. Cancelling ctx starts the sequence; it does not shorten it either. A
// nil ctx means context.Background().
func (l *Lifecycle) Run(ctx context.Context) error {
	servers, tasks, err := l.claimRun()
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	defer l.cancel()

	// 1. The configuration and the budget; signals, before anything is
	// bound or logged as listening.
	l.logBudget()
	l.warnWeakToken()
	defer l.watchSignals()()
	stopCtx := context.AfterFunc(ctx, func() { l.begin("context cancelled", false) })
	defer stopCtx()

	// 2. Bind.
	if err := l.bind(servers); err != nil {
		l.finish(l.clock.Now())
		return err
	}
	l.prepareServers(servers)

	// 3. Serve and boot: StartupDone when the boot ends.
	serving, serveErrs := l.serve(servers)
	boot := l.startBoot(tasks)

	// 4. Wait for ShutdownInitiated.
	fatal := l.awaitShutdownInitiated(boot, serveErrs, len(tasks))

	// 5. The sequence: the window, WindowEnded, the teardown (HooksDone,
	// HTTPDrained, Joined), Stopped.
	start := l.sequenceStart()
	l.lameDuckWindow(start)
	l.logLateArrivals(start)
	l.beginTeardown()
	err = l.teardown(servers, serving)
	for len(serveErrs) > 0 { // a server that failed during the sequence (step 4 had returned)
		fatal = errors.Join(fatal, <-serveErrs) // logged where it happened
	}
	l.awaitOwnWork(boot, start)
	l.finish(start)
	return errors.Join(fatal, err)
}

// claimRun marks the Lifecycle as running and returns what was registered
// before, or an error for a second Run.
func (l *Lifecycle) claimRun() ([]*server, []startupTask, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return nil, nil, errAlreadyRunning
	}
	l.running = true
	return append([]*server(nil), l.servers...), append([]startupTask(nil), l.startup...), nil
}

// awaitShutdownInitiated waits until the sequence starts: a signal, GET
// /prestop, BeginShutdown or Run's ctx begin it elsewhere; a failed boot or
// a server that stops with an error begins it here, and is returned as the
// fatal error. A boot that ends first makes the pod serve (becomeServing).
func (l *Lifecycle) awaitShutdownInitiated(boot *bootRun, serveErrs <-chan error, tasks int) (fatal error) {
	for {
		select {
		case err := <-boot.result:
			boot.over = true
			switch {
			case errors.Is(err, errInterrupted):
				// The sequence has started; the next turn sees it.
			case err != nil:
				l.begin("startup failed", false)
				return err
			default:
				l.becomeServing(tasks)
			}
		case err := <-serveErrs:
			l.begin("server failed", false)
			return err
		case <-l.events.ShutdownInitiated.Done():
			return nil
		}
	}
}

// becomeServing is StartupDone: the phase becomes serving, unless the
// sequence started first; the readiness refresh starts, and the line says
// what /startupz and /readyz now answer.
func (l *Lifecycle) becomeServing(tasks int) {
	if !l.phase.CompareAndSwap(int32(PhaseStarting), int32(PhaseServing)) {
		return
	}
	l.events.StartupDone.fire()
	l.startRefresh()
	msg := "lameduck: serving — /startupz and /readyz now 200"
	if names := l.checks.Names(); len(names) > 0 {
		msg = "lameduck: serving — /startupz now 200; /readyz follows its checks (" + strings.Join(names, ", ") + ")"
	}
	if l.unprobed.Load() {
		msg = "lameduck: serving — no listener serves the probes"
	}
	l.log.Info(msg, "startup_tasks", tasks)
}

// sequenceStart returns t = 0 of the sequence, once ShutdownInitiated has
// been announced. Its start was stamped when it began, by whichever
// goroutine began it; that goroutine announces it (the draining line, then
// the event) at once, and the window's events come after.
func (l *Lifecycle) sequenceStart() time.Time {
	start, _ := l.events.ShutdownInitiated.At()
	<-l.events.ShutdownInitiated.Done()
	return start
}

// beginTeardown is WindowEnded: the lame-duck window is over
// (Events().WindowEnded fires), and the phase becomes stopping.
func (l *Lifecycle) beginTeardown() {
	l.events.WindowEnded.fire()
	l.phase.Store(int32(PhaseStopping))
}

// awaitOwnWork waits, after the teardown and within the sequence's bound
// from start, for the Lifecycle's own goroutines that may still run: a
// startup task the signal interrupted and the readiness refresh; then it
// warns of a startup task the boot's budget left running.
func (l *Lifecycle) awaitOwnWork(boot *bootRun, start time.Time) {
	if !boot.over {
		l.awaitStartup(boot.running, start)
	}
	l.awaitRefresh(start)
	l.warnStrayStartup()
}

// finish fires Stopped and logs the end of the sequence.
func (l *Lifecycle) finish(start time.Time) {
	l.phase.Store(int32(PhaseStopped))
	l.events.Stopped.fire()
	now, _ := l.events.Stopped.At()
	if !l.events.ShutdownInitiated.Fired() {
		return
	}
	if captive := l.checks.Captive(); len(captive) > 0 {
		l.log.Warn("lameduck: readiness check ping(s) still running at exit; they ignored their context and cannot be joined",
			"checks", strings.Join(captive, ", "))
	}
	l.log.Info("lameduck: stopped", "since_signal", now.Sub(start).Round(time.Millisecond).String())
}
