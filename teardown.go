package lameduck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// teardown spends the teardown budget T, which starts when the lame-duck
// window ends, in four steps (seed 004, "The shutdown sequence" and "The
// background join"):
//
//  1. drain hooks, in order, for at most HookShare of T;
//  2. the HTTP drain: http.Server.Shutdown of the application's servers,
//     then of the probe listener, until T minus the tail; what is left then
//     is closed by force and named;
//  3. the background join, for at most JoinBudget;
//  4. closers, in reverse order, each with an equal share of what is left.
//
// The tail of T kept for steps 3 and 4 is JoinBudget, twice that when
// closers are registered (at most half of T), so the whole teardown fits T
// whatever handlers and tasks do. It returns an error wrapping context.DeadlineExceeded when a
// hook overran or requests were cut; the log has named them once.
func (l *Lifecycle) teardown(servers []*server, serving *sync.WaitGroup) error {
	l.mu.Lock()
	hooks := append([]namedFunc(nil), l.hooks...)
	closers := append([]namedFunc(nil), l.closers...)
	l.mu.Unlock()

	budget, join := l.cfg.ShutdownTeardown, l.cfg.JoinBudget
	began := l.clock.Now()
	end := began.Add(budget)
	closeReserve := time.Duration(0)
	if len(closers) > 0 {
		closeReserve = join
	}
	// The HTTP drain keeps at least half of the budget.
	if join+closeReserve > budget/2 {
		join, closeReserve = budget/4, budget/4
	}
	httpEnd := end.Add(-join - closeReserve)
	bgRunning, _ := l.bg.count()
	l.log.Info("lameduck: teardown — closing listeners, draining in-flight requests",
		"budget", budget.String(), "in_flight", l.track.inflight(), "servers", len(servers),
		"hooks", len(hooks), "background", bgRunning)

	var errs []error
	if len(hooks) > 0 {
		hooksEnd := began.Add(time.Duration(float64(budget) * l.cfg.HookShare))
		if hooksEnd.After(httpEnd) {
			hooksEnd = httpEnd
		}
		if err := l.runHooks(hooks, hooksEnd); err != nil {
			errs = append(errs, err)
		}
	}
	l.events.HooksDrained.fire(l.clock.Now())

	if err := l.drainHTTP(servers, serving, httpEnd); err != nil {
		errs = append(errs, err)
	}
	l.events.HTTPDrained.fire(l.clock.Now())

	l.join(min(join, end.Add(-closeReserve).Sub(l.clock.Now())))

	for i := len(closers) - 1; i >= 0; i-- {
		share := end.Sub(l.clock.Now()) / time.Duration(i+1)
		c := closers[i]
		if err := l.callUntil("closer", c, l.clock.Now().Add(share)); err != nil {
			l.log.Warn("lameduck: closer "+c.name+": "+err.Error(), "closer", c.name, "share", share.Round(time.Millisecond).String())
		}
	}
	return errors.Join(errs...)
}

// runHooks runs the drain hooks in order until deadline.
func (l *Lifecycle) runHooks(hooks []namedFunc, deadline time.Time) error {
	began := l.clock.Now()
	for i, h := range hooks {
		err := l.callUntil("drain hook", h, deadline)
		if errors.Is(err, context.DeadlineExceeded) {
			var skipped []string
			for _, s := range hooks[i+1:] {
				skipped = append(skipped, s.name)
			}
			l.log.Error(fmt.Sprintf("lameduck: drain hook %q overran the hooks' share %s of the teardown budget", h.name,
				deadline.Sub(began).Round(time.Millisecond)), "hook", h.name, "not_run", strings.Join(skipped, ", "))
			return fmt.Errorf("lameduck: drain hook %q: %w", h.name, context.DeadlineExceeded)
		}
		if err != nil {
			l.log.Warn("lameduck: drain hook "+h.name+" failed", "hook", h.name, "error", err.Error())
		}
	}
	l.log.Info("lameduck: drain hooks done", "hooks", len(hooks), "took", l.clock.Now().Sub(began).Round(time.Millisecond).String())
	return nil
}

// drainHTTP shuts the servers down, the application's together and then the
// probe listener, until deadline; then it closes what is left by force and
// names the requests it cut.
func (l *Lifecycle) drainHTTP(servers []*server, serving *sync.WaitGroup, deadline time.Time) error {
	began := l.clock.Now()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	timer := l.clock.NewTimer(deadline.Sub(began))
	var timerWG sync.WaitGroup
	timerWG.Go(func() {
		select {
		case <-timer.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	})
	defer func() { timer.Stop(); cancel(nil); timerWG.Wait() }()

	var cut []InFlightRequest
	var cutOnce sync.Once
	var forced atomic.Bool
	shut := func(group []*server) {
		var wg sync.WaitGroup
		for _, s := range group {
			wg.Go(func() {
				if err := s.srv.Shutdown(ctx); err != nil {
					forced.Store(true)
					cutOnce.Do(func() { cut = l.track.snapshot() })
					_ = s.srv.Close()
				}
			})
		}
		wg.Wait()
	}
	var app, probes []*server
	for _, s := range servers {
		if s.probes {
			probes = append(probes, s)
		} else {
			app = append(app, s)
		}
	}
	shut(app)
	shut(probes)
	serving.Wait()
	took := l.clock.Now().Sub(began).Round(time.Millisecond)

	if !forced.Load() {
		l.log.Info("lameduck: HTTP drain done — every in-flight request finished", "took", took.String())
		return nil
	}
	var b strings.Builder
	for i, r := range cut {
		if i == 20 {
			fmt.Fprintf(&b, ", and %d more", len(cut)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s (age %s)", r.Method, r.Path, r.Age.Round(time.Millisecond))
	}
	budget := deadline.Sub(began).Round(time.Millisecond)
	l.log.Error(fmt.Sprintf("lameduck: teardown budget spent: HTTP drain cut %d in-flight request(s) after %s: %s", len(cut), budget, b.String()),
		"http_budget", budget.String(), "cut", len(cut))
	return fmt.Errorf("lameduck: HTTP drain: %d request(s) cut: %w", len(cut), context.DeadlineExceeded)
}
