package lameduck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// teardown spends the teardown budget T, which starts when the lame-duck
// window ends, on the steps between WindowEnded and Stopped of the timeline
// that Events defines:
//
//  1. at once, side by side: the teardown hooks, in order, for at most
//     HookShare of T; and the HTTP drain — http.Server.Shutdown of the
//     application's servers (listeners close, idle connections close,
//     HTTP/2 connections get GOAWAY), then a wait for every tracked handler,
//     hijacked ones (WebSockets) included, until T minus the tail; what is
//     left then is closed by force and named; then the probe listener;
//  2. the background join, with whatever T has left (less the closers'
//     tail), or at most JoinBudget when that cap is set;
//  3. closers, in reverse order, each with an equal share of what is left.
//
// The tail of T kept for steps 2 and 3, should requests overrun, is
// joinReserve (or JoinBudget when set) when background work (GoWrite,
// GoLoop; not the readiness refresh, see startRefresh) was ever started, plus as much again when closers are registered (at most half of
// T in all), so the whole teardown fits T whatever handlers and tasks do; a
// service that uses neither gives its in-flight requests all of T (a write
// started during the drain is then joined from what the drain left). It
// returns an error wrapping context.DeadlineExceeded when a hook overran,
// requests were cut or background work was abandoned; the log has named
// them once.
func (l *Lifecycle) teardown(servers []*server, serving *sync.WaitGroup) error {
	l.mu.Lock()
	hooks := append([]namedFunc(nil), l.hooks...)
	closers := append([]namedFunc(nil), l.closers...)
	l.mu.Unlock()

	budget, join := l.cfg.ShutdownTeardown, cmp.Or(l.cfg.JoinBudget, joinReserve)
	began := l.clock.Now()
	end := began.Add(budget)
	// Keep a tail of the budget for the join and the closers only when the
	// application uses them; otherwise in-flight requests get all of it.
	closeReserve := time.Duration(0)
	if len(closers) > 0 {
		closeReserve = join
	}
	if !l.bg.used() {
		join = 0
	}
	if join+closeReserve > budget/2 { // the HTTP drain keeps at least half
		join, closeReserve = budget/4, budget/4
	}
	httpEnd := end.Add(-join - closeReserve)
	bgRunning, _ := l.bg.count()
	msg := "lameduck: teardown — closing listeners, draining in-flight requests"
	if l.readyInWindow() && !l.skipWindowed() && !l.unprobed.Load() {
		msg = "lameduck: teardown — /readyz now 503, closing listeners, draining in-flight requests"
	}
	l.log.Info(msg,
		"budget", budget.String(), "in_flight", l.inFlight(), "servers", len(servers),
		"hooks", len(hooks), "background", bgRunning)

	var hookErr, httpErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer l.events.HooksDone.fire()
		if len(hooks) == 0 {
			return
		}
		hooksEnd := began.Add(time.Duration(float64(budget) * l.cfg.HookShare))
		if hooksEnd.After(httpEnd) {
			hooksEnd = httpEnd
		}
		hookErr = l.runHooks(hooks, hooksEnd)
	})
	httpErr = l.drainHTTP(servers, serving, httpEnd)
	l.events.HTTPDrained.fire()
	wg.Wait()

	// The join gets whatever is left, whether or not a tail was kept:
	// writes started by requests answered during the drain are joined too.
	// It never runs into the closers' reserve or past T; JoinBudget, when
	// set, caps it.
	left := max(end.Add(-closeReserve).Sub(l.clock.Now()), 0)
	capped := l.cfg.JoinBudget > 0 && l.cfg.JoinBudget < left
	if capped {
		left = l.cfg.JoinBudget
	}
	joinErr := l.join(left, capped)

	for i := len(closers) - 1; i >= 0; i-- {
		share := end.Sub(l.clock.Now()) / time.Duration(i+1)
		c := closers[i]
		if err := l.callUntil("closer", c, l.clock.Now().Add(share)); err != nil {
			l.log.Warn("lameduck: closer "+c.name+": "+err.Error(), "closer", c.name, "share", share.Round(time.Millisecond).String())
		}
	}
	return errors.Join(hookErr, httpErr, joinErr)
}

// joinReserve is the tail of the teardown budget kept for the background
// join (and again for the closers) when JoinBudget is unset, should the
// HTTP drain overrun: the join is never left with nothing.
const joinReserve = 500 * time.Millisecond

// runHooks runs the teardown hooks in order until deadline.
func (l *Lifecycle) runHooks(hooks []namedFunc, deadline time.Time) error {
	began := l.clock.Now()
	for i, h := range hooks {
		err := l.callUntil("teardown hook", h, deadline)
		if errors.Is(err, context.DeadlineExceeded) {
			var skipped []string
			for _, s := range hooks[i+1:] {
				skipped = append(skipped, s.name)
			}
			l.log.Error(fmt.Sprintf("lameduck: teardown hook %q overran the hooks' share %s of the teardown budget", h.name,
				deadline.Sub(began).Round(time.Millisecond)), "hook", h.name, "not_run", strings.Join(skipped, ", "))
			return fmt.Errorf("lameduck: teardown hook %q: %w", h.name, context.DeadlineExceeded)
		}
		if err != nil {
			l.log.Warn("lameduck: teardown hook "+h.name+" failed", "hook", h.name, "error", err.Error())
		}
	}
	l.log.Info("lameduck: teardown hooks done", "hooks", len(hooks), "took", l.clock.Now().Sub(began).Round(time.Millisecond).String())
	return nil
}

// acceptGrace bounds how long teardown lets connections accepted just
// before the listeners closed have their first request read (at most a
// tenth of the HTTP drain's budget).
const acceptGrace = 250 * time.Millisecond

// drainHTTP is the HTTP drain, the left column of the teardown in the
// timeline Events defines: it shuts the application's servers down and
// waits for their tracked handlers until deadline; then it closes what is
// left by force, names the requests it cut, and shuts the probe listener
// down. Each step below is one line of that column.
func (l *Lifecycle) drainHTTP(servers []*server, serving *sync.WaitGroup, deadline time.Time) error {
	began := l.clock.Now()
	ctx, stop := l.drainDeadline(deadline.Sub(began))
	defer stop()
	app, probes := splitProbes(servers)

	if l.cfg.SendRetryAfter {
		l.refuseUntilIdle(ctx)
	}
	l.closeListeners(app)
	l.awaitFirstRequests(ctx, min(acceptGrace, deadline.Sub(began)/10))
	l.shutdownServers(ctx, app)
	// Shutdown neither waits for nor closes hijacked connections, and
	// returns at its deadline with handlers still running: wait for every
	// tracked handler ourselves.
	l.track.waitIdle(ctx)
	forced := ctx.Err() != nil
	var cut []InFlightRequest
	if forced {
		cut = l.cutRemaining(app)
	}
	l.shutdownProbes(ctx, probes)
	serving.Wait()
	return l.reportHTTPDrain(cut, forced, l.clock.Now().Sub(began), deadline.Sub(began))
}

// drainDeadline returns the HTTP drain's context, which the Lifecycle's
// clock cancels (cause context.DeadlineExceeded) once d has passed, and a
// stop that releases it and waits for the goroutine timing it.
func (l *Lifecycle) drainDeadline(d time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	timer := l.clock.NewTimer(d)
	var timerWG sync.WaitGroup
	timerWG.Go(func() {
		select {
		case <-timer.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	})
	return ctx, func() { timer.Stop(); cancel(nil); timerWG.Wait() }
}

// splitProbes parts the application's servers from the probe listener's
// (Config.ProbeAddr), which is shut down last.
func splitProbes(servers []*server) (app, probes []*server) {
	for _, s := range servers {
		if s.probes {
			probes = append(probes, s)
		} else {
			app = append(app, s)
		}
	}
	return app, probes
}

// refuseUntilIdle is SendRetryAfter: the listeners stay open, answering new
// requests 503 Retry-After, until the requests in flight have drained or
// ctx ends.
func (l *Lifecycle) refuseUntilIdle(ctx context.Context) {
	l.state.Store(stateRejecting)
	l.track.waitIdle(ctx)
}

// closeListeners closes the application's listeners, before Shutdown: from
// now on a Serve's accept error is expected.
func (l *Lifecycle) closeListeners(app []*server) {
	l.closing.Store(true)
	for _, s := range app {
		if s.extLn != nil {
			_ = s.extLn.Close()
		} else {
			_ = s.ln.Close()
		}
	}
}

// awaitFirstRequests lets the connections the listeners accepted just
// before they closed have their first request read, for at most grace (or
// until ctx ends), and only then does the drain call Shutdown: it drops any
// request it reads after it has begun, which a client that connected a
// moment before would see as an EOF. What is still silent after the grace
// has sent no request (an idle preconnect, a stalled TLS handshake, a
// half-sent header): Shutdown would wait up to 5s for each, so they are
// closed now, and the log says so.
func (l *Lifecycle) awaitFirstRequests(ctx context.Context, grace time.Duration) {
	graceCtx, cancelGrace := context.WithCancel(ctx)
	graceTimer := l.clock.NewTimer(grace)
	var graceWG sync.WaitGroup
	graceWG.Go(func() {
		select {
		case <-graceTimer.C():
			cancelGrace()
		case <-graceCtx.Done():
		}
	})
	l.track.waitFresh(graceCtx)
	graceTimer.Stop()
	cancelGrace()
	graceWG.Wait()
	if n := l.track.closeFresh(); n > 0 {
		l.log.Info("lameduck: closed connection(s) that had sent no request", "silent", n)
	}
}

// shutdownServers calls every server's graceful shutdown with ctx, side by
// side (http.Server.Shutdown; ServerFuncs.Shutdown), and waits for them; a
// server on two listeners shuts down once.
func (l *Lifecycle) shutdownServers(ctx context.Context, group []*server) {
	var wg sync.WaitGroup
	seen := map[*http.Server]bool{}
	for _, s := range group {
		switch {
		case s.ext != nil:
			wg.Go(func() { l.shutdownExt(ctx, s) })
		case !seen[s.srv]:
			seen[s.srv] = true
			wg.Go(func() { _ = s.srv.Shutdown(ctx) })
		}
	}
	wg.Wait()
}

// cutRemaining is the drain's end at its budget: it closes the application's
// servers by force (http.Server.Close; ServerFuncs' Close and every
// connection on its listener) and the hijacked connections Close skips, and
// returns the requests that were still in flight.
func (l *Lifecycle) cutRemaining(app []*server) []InFlightRequest {
	cut := l.track.snapshot()
	for _, s := range app {
		if s.ext != nil {
			l.forceExt(s)
		} else {
			_ = s.srv.Close()
		}
	}
	for _, r := range cut {
		if r.conn != nil {
			_ = r.conn.Close() // hijacked connections: Close above skipped them
		}
	}
	return cut
}

// shutdownProbes shuts the probe listener down last. Every probe answers at
// once from now on: a probe connection still open after a short grace
// (probeShutdownGrace) is a slow client, and cannot hold the drain.
func (l *Lifecycle) shutdownProbes(ctx context.Context, probes []*server) {
	if len(probes) > 0 {
		probeCtx, cancelProbes := l.withTimeout(ctx, probeShutdownGrace)
		l.shutdownServers(probeCtx, probes)
		cancelProbes()
	}
	for _, s := range probes {
		_ = s.srv.Close()
	}
}

// reportHTTPDrain logs how the HTTP drain ended, which took took of its
// budget; when requests were cut, it names them (the first 20), reports a
// TransitionCut and returns an error wrapping context.DeadlineExceeded.
func (l *Lifecycle) reportHTTPDrain(cut []InFlightRequest, forced bool, took, budget time.Duration) error {
	took = took.Round(time.Millisecond)
	if len(cut) == 0 {
		if forced {
			l.log.Warn("lameduck: HTTP drain budget spent waiting for connections that sent no request; closed them",
				"took", took.String())
			return nil
		}
		l.log.Info("lameduck: HTTP drain done — every in-flight request finished", "took", took.String())
		return nil
	}
	var b strings.Builder
	hijacked := 0
	for i, r := range cut {
		if r.Hijacked {
			hijacked++
		}
		if i == 20 {
			fmt.Fprintf(&b, ", and %d more", len(cut)-i)
			continue
		}
		if i > 20 {
			continue
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s (age %s", r.Method, r.Path, r.Age.Round(time.Millisecond))
		if r.Hijacked {
			b.WriteString(", hijacked")
		}
		b.WriteString(")")
	}
	budget = budget.Round(time.Millisecond)
	l.transition(Transition{Kind: TransitionCut, At: l.clock.Now(), Count: len(cut)})
	l.log.Error(fmt.Sprintf("lameduck: teardown budget spent: HTTP drain cut %d in-flight request(s) after %s: %s", len(cut), budget, b.String()),
		"http_budget", budget.String(), "cut", len(cut), "hijacked_closed", hijacked)
	return fmt.Errorf("lameduck: HTTP drain: %d request(s) cut: %w", len(cut), context.DeadlineExceeded)
}
