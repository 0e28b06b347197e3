package lameduck

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/health"
)

// ErrStartupFailed is wrapped by the error Run returns when a startup task
// fails. The process never reported ready.
var ErrStartupFailed = errors.New("startup failed")

// errInterrupted is runStartup's answer when the shutdown sequence started
// before the boot finished: not a failure, but not a finished boot either.
var errInterrupted = errors.New("lameduck: startup interrupted by shutdown")

// ErrAlreadyRunning is returned by a second call to Run, and by what may
// only be registered before Run (AddServer, AddServerFuncs, AddStartupTask)
// once Run has started. Registrations refused
// because the shutdown sequence has started return ErrShuttingDown.
var ErrAlreadyRunning = errors.New("lameduck: the Lifecycle is already running")

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
	cfg     Config // resolved; immutable after New
	budget  Budget // cfg's grace-period arithmetic; immutable after New
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

type server struct {
	srv    *http.Server // nil for a ServerFuncs
	ext    *ServerFuncs // nil for an *http.Server
	extLn  *extListener // what ext.Serve serves on; set by Run
	ln     net.Listener
	probes bool // the Config.ProbeAddr listener: shut down last
	tls    bool // served with ServeTLS; decided before any Serve runs
}

// New returns a Lifecycle configured by cfg, filled from the environment and
// the defaults as [Config] describes.
//
// It returns an error wrapping [ErrInvalidConfig] that names every bad
// setting, its value and the fix; nothing is bound and no goroutine is
// started, so a caller can exit non-zero before listening.
func New(cfg Config) (*Lifecycle, error) {
	res, errs := Resolve(cfg)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cfg = res.Config
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lifecycle{
		cfg:     cfg,
		budget:  res.Budget(),
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
	if cfg.ext != nil {
		for _, w := range cfg.ext.Waits {
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

// InFlight returns the application requests in flight on the registered
// servers, oldest first. Probe and /prestop requests are not counted.
func (l *Lifecycle) InFlight() []InFlightRequest { return l.track.snapshot() }

// AddServer registers srv to be served by Run and shut down by the sequence.
// Every server integration in contrib uses the same verb and order
// (ldfiber.AddServer(lc, app, addr, ln), ldfasthttp.AddServer(lc, srv,
// addr, ln)); here the address is srv.Addr, which an http.Server carries.
//
// If ln is nil, Run binds srv.Addr (":http" when empty) over TCP; a bind
// failure makes Run return at once. When srv.TLSConfig is set, Run serves
// TLS (ServeTLS with the certificates in TLSConfig: Certificates or
// GetCertificate), HTTP/2 included; ln must then be a plain TCP listener. At Run, srv.Handler (or
// http.DefaultServeMux when nil) is wrapped: requests to /healthz, /readyz,
// /startupz and, when enabled, /prestop are answered by the probes (unless
// Config.ProbeAddr moves them to their own listener), and every other
// request is tracked as in flight. Do not call srv's Serve, Shutdown or
// Close yourself.
//
// AddServer returns ErrAlreadyRunning once Run has started.
func (l *Lifecycle) AddServer(srv *http.Server, ln net.Listener) error {
	if srv == nil {
		return errors.New("lameduck: AddServer: nil *http.Server")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return ErrAlreadyRunning
	}
	l.servers = append(l.servers, &server{srv: srv, ln: ln})
	return nil
}

// AddStartupTask registers boot work (migrations, cache warm-up) that runs
// after the listeners are bound, so the probes answer while it runs:
// /startupz and /readyz 503 starting, /healthz 200. Tasks run one after the
// other in the order they were added; when all have returned nil the phase
// becomes serving. ctx is cancelled when the shutdown sequence starts, and
// when Config.StartupTimeout, the boot's budget, is spent. A task should
// return when ctx ends: at the budget, one that has not returned 100ms
// later fails the boot without being waited for (as below, the error says
// it was still running), and is left running; at the shutdown signal, Run
// waits for it within the sequence's bound.
//
// With a [Retry] (at most one), a task that fails is tried again after an
// exponential backoff with jitter, for a dependency that is not up yet:
// each failed try is logged once, with its error and the wait before the
// next. Without one, the first error is final.
//
// A task's final failure stops the boot: the phase never becomes serving,
// one error line names the task, its tries, the time spent and its last
// error, the servers are shut down without a lame-duck window (the pod was
// never ready, so no endpoint routes to it), and Run returns an error
// wrapping ErrStartupFailed. A panic counts as a failed try.
//
// AddStartupTask returns ErrAlreadyRunning once Run has started, and an
// error for a nil fn, more than one Retry or a negative field in one.
func (l *Lifecycle) AddStartupTask(name string, fn func(ctx context.Context) error, retry ...Retry) error {
	if fn == nil {
		return fmt.Errorf("lameduck: AddStartupTask(%q): nil function", name)
	}
	t := startupTask{name: name, fn: fn}
	switch {
	case len(retry) > 1:
		return fmt.Errorf("lameduck: AddStartupTask(%q): %d Retry values; pass at most one", name, len(retry))
	case len(retry) == 1:
		r, err := retry[0].resolve(name)
		if err != nil {
			return err
		}
		t.retry = &r
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return ErrAlreadyRunning
	}
	l.startup = append(l.startup, t)
	return nil
}

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
	case l.cfg.ext != nil && l.cfg.ext.Draining != nil:
		// A runner's window is held open by its jobs, up to its bound: the
		// bound is the window, as the startup budget line says.
		w = l.cfg.maxWindow()
		msg = l.cfg.ext.Draining(flip, w)
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

// onSignal handles every signal after Run installed its handler.
func (l *Lifecycle) onSignal(sig os.Signal) {
	if l.begin("signal "+sigName(sig), true) {
		return
	}
	l.mu.Lock()
	bySignal, reason := l.bySignal, l.reason
	l.bySignal = true // any later signal is a second signal
	l.mu.Unlock()
	switch {
	case !bySignal && reason == reasonPreStop:
		l.log.Info("lameduck: "+sigName(sig)+" after the preStop hook: the sequence is already running; no second window",
			"phase", l.Phase().String())
	case bySignal && l.cfg.ExitOnSecondSignal:
		l.log.Error("lameduck: second "+sigName(sig)+": exiting now without finishing the drain",
			"setting", l.cfg.EnvPrefix+"EXIT_ON_SECOND_SIGNAL=true", "in_flight", l.track.inflight())
		l.exit(exitCode(sig))
	default:
		l.log.Warn("lameduck: "+sigName(sig)+" ignored: the shutdown sequence runs to completion",
			"phase", l.Phase().String(), "started_by", reason,
			"hint", "set "+l.cfg.EnvPrefix+"EXIT_ON_SECOND_SIGNAL=true to exit on a second signal")
	}
}

func sigName(sig os.Signal) string {
	if s, ok := sig.(interface{ String() string }); ok {
		switch s.String() {
		case "terminated":
			return "SIGTERM"
		case "interrupt":
			return "SIGINT"
		}
		return s.String()
	}
	return fmt.Sprint(sig)
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
// before, or ErrAlreadyRunning for a second Run.
func (l *Lifecycle) claimRun() ([]*server, []startupTask, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return nil, nil, ErrAlreadyRunning
	}
	l.running = true
	return append([]*server(nil), l.servers...), append([]startupTask(nil), l.startup...), nil
}

// watchSignals hands Config.Signals to onSignal until the returned stop is
// called, which waits for the goroutine doing it. It is installed before
// anything is bound: a SIGTERM that comes the instant the port answers must
// start the sequence, not kill the process.
func (l *Lifecycle) watchSignals() (stop func()) {
	var wg sync.WaitGroup
	stopSignals := make(chan struct{})
	if !l.cfg.IgnoreSignals {
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, l.cfg.Signals...)
		wg.Go(func() {
			defer signal.Stop(sigs)
			for {
				select {
				case sig := <-sigs:
					l.onSignal(sig)
				case <-stopSignals:
					return
				}
			}
		})
	}
	return func() { close(stopSignals); wg.Wait() }
}

// bind listens on the address of every server registered without a
// listener. If one cannot bind, it closes every other listener (AddServer
// handed them over) and returns the error, logged, before any request is
// served.
func (l *Lifecycle) bind(servers []*server) error {
	for i, s := range servers {
		if s.ln != nil {
			continue
		}
		var addr string
		if s.ext != nil {
			addr = s.ext.Addr
		} else if addr = s.srv.Addr; addr == "" {
			addr = ":http"
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for j, b := range servers {
				if j != i && b.ln != nil {
					_ = b.ln.Close()
				}
			}
			err = fmt.Errorf("lameduck: listen on %s: %w", addr, err)
			l.log.Error(err.Error())
			return err
		}
		s.ln = ln
	}
	return nil
}

// prepareServers readies the bound servers to serve, and logs each
// listener: an *http.Server's handler is wrapped (the probes, request
// tracking) and its TLS decided, a ServerFuncs gets its tracked listener.
// It warns when no listener serves the probes, and when a server has no
// ReadHeaderTimeout.
func (l *Lifecycle) prepareServers(servers []*server) {
	if len(servers) == 0 {
		l.unprobed.Store(true)
		l.log.Warn("lameduck: no listener serves the probes: nothing answers " + strings.Join(l.cfg.LivenessPaths, ", ") + ", " + l.cfg.ReadinessPath + " or " + l.cfg.StartupPath +
			"; register a server with AddServer, or set " + l.cfg.EnvPrefix + "PROBE_ADDR (such as \":9090\")")
	}
	// One *http.Server may be registered on several listeners (IPv4 and
	// IPv6, say): instrument it once, and decide TLS before any Serve runs
	// (net/http's HTTP/2 setup writes TLSConfig).
	instrumented := map[*http.Server]bool{}
	for _, s := range servers {
		if s.ext != nil {
			s.extLn = newExtListener(s.ln, l.track)
			l.log.Info("lameduck: listening", "addr", s.ln.Addr().String(), "server", s.ext.Name, "probes", l.cfg.ProbeAddr == "")
			continue
		}
		s.tls = s.srv.TLSConfig != nil
		if !s.probes && !instrumented[s.srv] {
			instrumented[s.srv] = true
			l.instrument(s.srv)
			if s.srv.ReadHeaderTimeout <= 0 && s.srv.ReadTimeout <= 0 {
				l.log.Warn("lameduck: the server on "+s.ln.Addr().String()+" has no ReadHeaderTimeout: a client that sends its "+
					"headers slowly (slowloris) holds its connection, and the drain, until the teardown budget is spent; "+
					"set http.Server.ReadHeaderTimeout, such as 10s (docs/security.md)", "addr", s.ln.Addr().String())
			}
		}
		l.log.Info("lameduck: listening", "addr", s.ln.Addr().String(), "tls", s.tls, "probes", s.probes || l.cfg.ProbeAddr == "")
	}
}

// serve runs every server's Serve on its own goroutine, which serving
// counts until it returns (the HTTP drain waits for it). A server that
// stops with an error, other than after the teardown closed it, sends
// that error, logged, on errs (buffered for every server).
func (l *Lifecycle) serve(servers []*server) (serving *sync.WaitGroup, errs <-chan error) {
	serveErrs := make(chan error, len(servers))
	serving = &sync.WaitGroup{}
	for _, s := range servers {
		serving.Go(func() {
			var serve func(net.Listener) error
			switch {
			case s.ext != nil:
				serve = func(net.Listener) error { return s.ext.Serve(s.extLn) }
			case s.tls:
				// Certificates come from TLSConfig (Certificates or
				// GetCertificate); HTTP/2 is negotiated as ServeTLS does.
				serve = func(ln net.Listener) error { return s.srv.ServeTLS(ln, "", "") }
			default:
				serve = s.srv.Serve
			}
			if err := serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !l.closing.Load() {
				err = fmt.Errorf("lameduck: serve on %s: %w", s.ln.Addr(), err)
				l.log.Error(err.Error())
				serveErrs <- err
			}
		})
	}
	return serving, serveErrs
}

// bootRun is the startup tasks' run, as Run follows it.
type bootRun struct {
	result  chan error    // runStartup's answer, sent once
	running chan struct{} // closed when runStartup has returned
	over    bool          // Run has read result; only Run's goroutine touches it
}

// startBoot runs the startup tasks on a goroutine of their own, while the
// servers serve and the probes answer 503 starting.
func (l *Lifecycle) startBoot(tasks []startupTask) *bootRun {
	b := &bootRun{result: make(chan error, 1), running: make(chan struct{})}
	go func() {
		defer close(b.running)
		b.result <- l.runStartup(tasks)
	}()
	return b
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
// (Lifecycle.WindowEnded's channel closes), and the phase becomes stopping.
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

// logBudget logs the resolved settings and the grace-period arithmetic
// (docs/probes-and-shutdown.md, "Sizing terminationGracePeriodSeconds"),
// made by Resolved.Budget, the function lameduck vet uses: the preStop
// sleep, the longest window (the delay, or the idle drain's bound) and the
// teardown budget must fit terminationGracePeriodSeconds, or the kubelet
// SIGKILLs the pod mid-drain. Each number comes with the rule that chose it.
func (l *Lifecycle) logBudget() {
	c, b := &l.cfg, l.budget
	join := "what the teardown leaves"
	if c.JoinBudget > 0 {
		join = c.JoinBudget.String()
	}
	attrs := []any{"env", c.Env, "drain_mode", c.DrainMode, "window", b.Window.String(), "teardown", b.Teardown.String(),
		"join_budget", join, "budget", b.Total.String(), "prestop", c.PreStop}
	if c.ext != nil && c.ext.LogAttrs != nil {
		attrs = append(attrs, c.ext.LogAttrs()...)
	} else {
		attrs = append(attrs, "not_ready_at", c.NotReadyAt)
	}
	if b.PreStop > 0 {
		attrs = append(attrs, "prestop_delay", b.PreStop.String())
	}
	if b.Grace > 0 {
		attrs = append(attrs, "termination_grace", b.Grace.String(), "margin", b.Margin.String())
	}
	for _, r := range []struct{ key, setting string }{
		{"window_rule", b.WindowSetting}, {"teardown_rule", "SHUTDOWN_TEARDOWN"}, {"grace_rule", "TERMINATION_GRACE"},
	} {
		if s, ok := b.Sources[r.setting]; ok {
			attrs = append(attrs, r.key, s)
		}
	}
	if b.Fits {
		l.log.Info("lameduck: "+b.String(), attrs...)
	} else {
		l.log.Warn("lameduck: "+b.String(), attrs...)
	}
}

// awaitStartup waits for startup tasks that are still running after the
// teardown, up to the end of the overall bound.
func (l *Lifecycle) awaitStartup(done <-chan struct{}, start time.Time) {
	left := start.Add(l.cfg.maxWindow() + l.cfg.ShutdownTeardown).Sub(l.clock.Now())
	t := l.clock.NewTimer(left)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		l.log.Warn("lameduck: a startup task is still running at exit; it ignored its context")
	}
}

// startRefresh runs Checker.RunRefresh, which pings the checks with
// Refresh on their own schedule, from the moment the pod serves until the
// shutdown signal (the loops' context), once such a check exists: it is
// called when the phase becomes serving and by AddCheck for each check with
// Refresh, so one added while serving is refreshed too. It is a goroutine
// of the Lifecycle's own, not background work: the teardown keeps no share
// of its budget for it. RunRefresh returns when it finds nothing to
// refresh; a check added meanwhile makes it look again.
func (l *Lifecycle) startRefresh() {
	if !l.refreshChecks.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.initiated || l.Phase() != PhaseServing:
		return
	case l.refreshing:
		l.refreshAll = true // RunRefresh is woken too (Checker.AddCheck); this covers its return
		return
	}
	l.refreshing = true
	l.refreshWG.Go(func() {
		for {
			l.checks.RunRefresh(l.loopCtx)
			l.mu.Lock()
			again := l.refreshAll && l.loopCtx.Err() == nil
			l.refreshAll, l.refreshing = false, again
			l.mu.Unlock()
			if !again {
				return
			}
		}
	})
}

// awaitRefresh waits for the refresh goroutine, which returns as soon as
// the signal has cancelled its context (a ping still running is left to
// the probes' rules), up to the end of the overall bound.
func (l *Lifecycle) awaitRefresh(start time.Time) {
	l.mu.Lock()
	running := l.refreshing // false: it never ran, or it is returning
	l.mu.Unlock()
	if !running {
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); l.refreshWG.Wait() }()
	t := l.clock.NewTimer(max(start.Add(l.cfg.maxWindow()+l.cfg.ShutdownTeardown).Sub(l.clock.Now()), 0))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		l.log.Warn("lameduck: the readiness refresh is still running at exit")
	}
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
