// Package ldfx hands an uber-go/fx application (go.uber.org/fx) to a lameduck
// Lifecycle in one option, so that lameduck, not fx, owns the signal and the
// shutdown timeline, and the application keeps calling app.Run():
//
//	app := fx.New(
//		ldfx.Option(lameduck.Config{}), // the one added line
//		fx.Provide(NewDB, NewMux),
//		fx.Invoke(func(lc *lameduck.Lifecycle, mux *http.ServeMux) error {
//			return lc.AddServer(&http.Server{Addr: ":8080", Handler: mux}, nil)
//		}),
//	)
//	app.Run()
//
// With the option:
//
//   - *lameduck.Lifecycle is in the graph, for constructors to register
//     servers (Lifecycle.AddServer), checks, background work and closers;
//   - the probes answer from the first moment: app.Run's start binds the
//     Lifecycle's servers before any of the application's fx OnStart hooks
//     runs, and /startupz and /readyz answer 503 starting while they run;
//   - the application's fx OnStart hooks are the Lifecycle's startup task
//     ("fx OnStart hooks"), run in order under LAMEDUCK_STARTUP_TIMEOUT, with
//     fx's own semantics: the first error stops the boot;
//   - on SIGTERM (or SIGINT, GET /prestop, fx.Shutdowner) the Lifecycle runs
//     its sequence (lameduck.Events): readiness 503, the lame-duck window,
//     the HTTP drain, the background join; then the application's fx OnStop
//     hooks, in reverse order, as one closer ("fx OnStop hooks") whose
//     context carries what the teardown budget has left; app.Run returns
//     when the sequence is over, and exits 1 when Lifecycle.Run returned an
//     error;
//   - fx's StartTimeout and StopTimeout are set so that neither cuts the
//     boot or the drain short: the stop timeout is the sequence's bound
//     (the window's bound plus the teardown budget) plus 1s, a backstop that
//     lameduck's own bound never reaches.
//
// The operator's page is docs/fx.md in the lameduck repository.
//
// Import it as
//
//	import ldfx "github.com/lameduck/lameduck/contrib/fx"
package ldfx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
	"go.uber.org/fx"
)

// stopSlack is what the fx stop timeout adds to the sequence's bound: fx
// never cuts a sequence that lameduck bounds itself.
const stopSlack = time.Second

// noStartTimeout is fx's start timeout when LAMEDUCK_STARTUP_TIMEOUT is
// unset: the boot has no bound of lameduck's, so fx's must not add one
// (the kubelet's startup probe bounds it in a cluster).
const noStartTimeout = 365 * 24 * time.Hour

// Option returns the fx option that makes a lameduck Lifecycle from cfg (as
// lameduck.New does: cfg, then LAMEDUCK_* variables, then the defaults),
// provides it to the graph as *lameduck.Lifecycle, and hands the
// application's fx lifecycle to it, as the package documentation describes.
// Give it once per fx.App, and do not give fx.StartTimeout or
// fx.StopTimeout after it: the later option wins in fx, and a stop timeout
// shorter than the sequence would make app.Run exit in the middle of the
// drain (the stop hook then logs a warning that names both numbers).
//
// A bad setting is returned as fx.New's error (app.Err()), wrapping
// a *lameduck.ConfigError naming the setting, its value and the fix;
// app.Run then exits 1 before anything listens.
//
// The application's fx hooks are kept by the Lifecycle instead of fx (the
// option decorates fx.Lifecycle), so fx's event log names the option's own
// hook only. Hooks appended after app.Run's start began are refused with a
// log line: the Lifecycle has read its startup task by then.
func Option(cfg lameduck.Config) fx.Option {
	lc, err := lameduck.New(cfg)
	if err != nil {
		return fx.Error(err)
	}
	rc := lc.Config()
	window := rc.ShutdownDelay
	if window == lameduck.NoDelay {
		window = 0
	}
	if rc.DrainMode == lameduck.DrainIdle {
		window = rc.DrainTimeout
	}
	start := noStartTimeout
	if rc.StartupTimeout > 0 {
		start = rc.StartupTimeout + stopSlack
	}
	a := &adapter{lc: lc, bound: window + rc.ShutdownTeardown, done: make(chan struct{})}
	return fx.Options(
		fx.Supply(lc),
		fx.Decorate(a.decorate),
		// The decoration is made when something first asks for
		// fx.Lifecycle: ask for it, so the option's hook is there even in
		// an application whose constructors append none.
		fx.Invoke(func(fx.Lifecycle) {}),
		fx.StartTimeout(start),
		fx.StopTimeout(a.bound+stopSlack),
	)
}

// adapter is the fx.Lifecycle the application's constructors are given, and
// the one hook the option registers on fx's own lifecycle.
type adapter struct {
	lc    *lameduck.Lifecycle
	bound time.Duration // the sequence's bound: the window's bound + the teardown budget

	once sync.Once // the option's hook is registered once, however many scopes decorate

	mu      sync.Mutex
	hooks   []fx.Hook // guarded by mu: the application's hooks, in the order appended
	started int       // guarded by mu: how many of hooks have run their OnStart without error
	sealed  bool      // guarded by mu: the startup task has read hooks; Append refuses

	done   chan struct{} // closed when Lifecycle.Run has returned
	runErr error         // Run's result; read after done is closed
}

// decorate registers the option's hook on fx's lifecycle and gives the
// application the adapter in its place.
func (a *adapter) decorate(real fx.Lifecycle, sd fx.Shutdowner) (fx.Lifecycle, error) {
	var err error
	a.once.Do(func() {
		err = errors.Join(
			a.lc.AddStartupTask("fx OnStart hooks", a.startHooks),
			a.lc.AddCloser("fx OnStop hooks", a.stopHooks))
		real.Append(fx.Hook{
			OnStart: func(ctx context.Context) error { return a.onStart(ctx, sd) },
			OnStop:  a.onStop,
		})
	})
	return a, err
}

// Append keeps h to be run by the Lifecycle: its OnStart in the startup
// task, its OnStop in the closer. It implements fx.Lifecycle and is safe for
// concurrent use.
func (a *adapter) Append(h fx.Hook) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sealed {
		a.lc.Config().Logger.Error("lameduck: ldfx: an fx hook appended after the start began is not run; append hooks in constructors and fx.Invoke functions")
		return
	}
	a.hooks = append(a.hooks, h)
}

// startHooks is the startup task: every OnStart in order; the first error
// stops the boot.
func (a *adapter) startHooks(ctx context.Context) error {
	a.mu.Lock()
	a.sealed = true
	hooks := a.hooks
	a.mu.Unlock()
	for i, h := range hooks {
		if h.OnStart != nil {
			if err := h.OnStart(ctx); err != nil {
				return fmt.Errorf("fx OnStart hook %d of %d: %w", i+1, len(hooks), err)
			}
		}
		a.mu.Lock()
		a.started = i + 1
		a.mu.Unlock()
	}
	return nil
}

// stopHooks is the closer: the OnStop of every hook whose OnStart ran, in
// reverse order, each under ctx (what the teardown budget has left); every
// error is returned, joined, and the next hook still runs.
func (a *adapter) stopHooks(ctx context.Context) error {
	a.mu.Lock()
	hooks := a.hooks[:a.started]
	a.mu.Unlock()
	var errs []error
	for i := len(hooks) - 1; i >= 0; i-- {
		if h := hooks[i]; h.OnStop != nil {
			if err := h.OnStop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("fx OnStop hook %d of %d: %w", i+1, len(hooks), err))
			}
		}
	}
	return errors.Join(errs...)
}

// onStart runs the Lifecycle and returns when it serves (its boot, the
// application's OnStart hooks, is over), or with its error when it stopped
// first. When the Lifecycle's sequence ends by itself (a server failing,
// say), fx is told to stop, with exit code 1 when Run failed.
func (a *adapter) onStart(ctx context.Context, sd fx.Shutdowner) error {
	go func() {
		a.runErr = a.lc.Run(context.Background())
		close(a.done)
		code := 0
		if a.runErr != nil {
			code = 1
		}
		_ = sd.Shutdown(fx.ExitCode(code)) // an error only says nobody was waiting yet
	}()
	select {
	case <-a.lc.Events().StartupDone.Done():
		return nil
	case <-a.done:
		if a.runErr == nil {
			return errors.New("lameduck: the Lifecycle stopped before its boot ended")
		}
		return a.runErr
	case <-ctx.Done():
		// fx's start timeout: fx will not call this hook's OnStop, so the
		// sequence is started and waited for here (no window: the pod
		// never became ready).
		a.lc.BeginShutdown("fx: start timeout")
		<-a.done
		return ctx.Err()
	}
}

// onStop starts the Lifecycle's sequence, if a signal has not already, and
// returns Run's result when it is over.
func (a *adapter) onStop(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < a.bound {
		a.lc.Config().Logger.Warn("lameduck: ldfx: fx's stop timeout is shorter than the shutdown sequence: app.Run will exit in the middle of the drain; remove the fx.StopTimeout option given after ldfx.Option",
			"fx_stop_timeout_left", time.Until(dl).Round(time.Millisecond).String(), "sequence_bound", a.bound.String())
	}
	a.lc.BeginShutdown("fx: stop")
	select {
	case <-a.done:
		return a.runErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
