package lameduck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Retry makes a startup task try again when it fails, for a dependency that
// is not up yet at boot (a database still starting in the same rollout):
// after the n-th failed try it waits First × 2^(n−1), capped at Max, with
// jitter (a uniformly random wait between half of that and all of it, so a
// fleet of pods booting together does not retry in step; the "equal
// jitter" of aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter),
// then calls the task again.
//
// Tries stop at the first success, after Tries tries, when the boot's
// budget (Config.StartupTimeout) has no room left for the next wait, or
// when the shutdown sequence starts. Pass one to AddStartupTask. The zero
// Retry retries with the defaults until the budget is spent.
type Retry struct {
	// First is the wait after the first failed try, a time.Duration.
	// Zero means the default, 250ms; negative is an error.
	First time.Duration
	// Max caps each wait, a time.Duration. Zero means the default, 10s;
	// negative is an error.
	Max time.Duration
	// Tries caps the number of tries, the first included. Zero means no cap
	// (Config.StartupTimeout then bounds the retrying; without it, a task
	// retries until it succeeds or the sequence starts); negative is an
	// error.
	Tries int
}

// Defaults of Retry.
const (
	defaultRetryFirst = 250 * time.Millisecond
	defaultRetryMax   = 10 * time.Second
)

func (r Retry) resolve(task string) (Retry, error) {
	if r.First < 0 || r.Max < 0 || r.Tries < 0 {
		return r, fmt.Errorf("lameduck: AddStartupTask(%q): Retry{First: %s, Max: %s, Tries: %d}: no field may be negative; zero means the default",
			task, r.First, r.Max, r.Tries)
	}
	if r.First == 0 {
		r.First = defaultRetryFirst
	}
	if r.Max == 0 {
		r.Max = max(defaultRetryMax, r.First)
	}
	return r, nil
}

// backoff returns the wait after the n-th failed try (n ≥ 1), before
// jitter.
func (r *Retry) backoff(n int) time.Duration {
	d := r.First
	for i := 1; i < n && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

type startupTask struct {
	name  string
	fn    func(context.Context) error
	retry *Retry // nil: the first error is final
}

// runStartup runs the startup tasks in order under the boot's budget; the
// first final failure stops it.
func (l *Lifecycle) runStartup(tasks []startupTask) error {
	began := l.clock.Now()
	ctx, deadline := l.startCx, time.Time{}
	if l.cfg.StartupTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = l.withTimeout(l.startCx, l.cfg.StartupTimeout)
		defer cancel()
		deadline = began.Add(l.cfg.StartupTimeout)
	}
	for _, t := range tasks {
		if err := l.runTaskTries(ctx, t, deadline); err != nil {
			return err
		}
		if l.startCx.Err() != nil {
			return errInterrupted // the tasks after it are skipped
		}
	}
	return nil
}

// runTaskTries runs one startup task, trying again as its Retry says,
// until deadline (zero: none).
func (l *Lifecycle) runTaskTries(ctx context.Context, t startupTask, deadline time.Time) error {
	began := l.clock.Now()
	spent := func() string { return l.clock.Now().Sub(began).Round(time.Millisecond).String() }
	for try := 1; ; try++ {
		err := l.callStartup(ctx, t)
		if errors.Is(err, errStillRunning) {
			// The budget is spent and the task had not returned when its
			// context ended. The boot fails now, naming it; the task is
			// left running (Run says so again at exit if it still is).
			err = fmt.Errorf("lameduck: startup task %q: %w after %s in %s%s: it was still running %s after its context ended, and is not waited for "+
				"(a startup task must return when its context ends)", t.name, ErrStartupFailed, triesText(try), spent(), l.budgetSpent(), startupReturnGrace)
			l.log.Error(err.Error(), "task", t.name, "tries", try, "took", spent())
			return err
		}
		if err == nil {
			l.log.Info("lameduck: startup task done", "task", t.name, "tries", try, "took", spent())
			return nil
		}
		if l.startCx.Err() != nil {
			// Interrupted by the signal: not a failure of the task.
			l.log.Info("lameduck: startup task interrupted by shutdown", "task", t.name, "tries", try, "error", err.Error(), "took", spent())
			return errInterrupted
		}
		why := ""
		var wait time.Duration
		switch r := t.retry; {
		case ctx.Err() != nil:
			why = l.budgetSpent()
		case r == nil:
		case r.Tries > 0 && try >= r.Tries:
			why = fmt.Sprintf("; Retry.Tries=%d reached", r.Tries)
		default:
			b := r.backoff(try)
			wait = b/2 + rand.N(b/2+1)
			if !deadline.IsZero() && !l.clock.Now().Add(wait).Before(deadline) {
				why = fmt.Sprintf("; no room for another try in the startup budget %sSTARTUP_TIMEOUT=%s (raise it, within the startup probe's failureThreshold × periodSeconds)",
					l.cfg.EnvPrefix, l.cfg.StartupTimeout)
				wait = 0
			}
		}
		if wait == 0 {
			err = fmt.Errorf("lameduck: startup task %q: %w after %s in %s%s: %w", t.name, ErrStartupFailed, triesText(try), spent(), why, err)
			l.log.Error(err.Error(), "task", t.name, "tries", try, "took", spent())
			return err
		}
		l.log.Warn("lameduck: startup task failed; trying again", "task", t.name, "try", try, "error", err.Error(),
			"retry_in", wait.Round(time.Millisecond).String())
		tm := l.clock.NewTimer(wait)
		select {
		case <-tm.C():
		case <-l.startCx.Done():
			tm.Stop()
			l.log.Info("lameduck: startup task interrupted by shutdown", "task", t.name, "tries", try, "took", spent())
			return errInterrupted
		}
	}
}

// budgetSpent is the reason of a failure at the end of the boot's budget.
func (l *Lifecycle) budgetSpent() string {
	return fmt.Sprintf("; the startup budget %sSTARTUP_TIMEOUT=%s is spent (raise it, within the startup probe's failureThreshold × periodSeconds)",
		l.cfg.EnvPrefix, l.cfg.StartupTimeout)
}

func triesText(try int) string {
	if try == 1 {
		return "1 try"
	}
	return fmt.Sprintf("%d tries", try)
}

// startupReturnGrace is how long, once the boot's budget is spent, a
// startup task has to return (its context has ended) before the boot fails
// without it.
const startupReturnGrace = 100 * time.Millisecond

// errStillRunning is callStartup's answer when the boot's budget is spent
// and the task has not returned within startupReturnGrace.
var errStillRunning = errors.New("lameduck: startup task still running at the end of the startup budget")

// callStartup runs one try of t in a goroutine of its own and waits for it:
// until it returns, or, when Config.StartupTimeout's budget (ctx's
// deadline) is spent first, for startupReturnGrace more and no longer: it
// reports errStillRunning and leaves the task running, noted in
// l.strayStartup. At the shutdown signal
// (which also ends ctx) it waits for the task to return, within the
// sequence's bound (Run's awaitStartup), as before a signal.
func (l *Lifecycle) callStartup(ctx context.Context, t startupTask) error {
	res := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		err := errors.New("the task called runtime.Goexit")
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("panic: %v", v)
			}
			res <- err
		}()
		err = t.fn(ctx)
	}()
	if ok, err := resultBy(ctx, res); ok {
		return err
	}
	if l.startCx.Err() != nil {
		return <-res // the signal: Run bounds this wait
	}
	// The budget: a task that honours its context returns now.
	grace := l.clock.NewTimer(startupReturnGrace)
	defer grace.Stop()
	select {
	case err := <-res:
		return err
	case <-grace.C():
	}
	l.mu.Lock()
	l.strayStartup = &strayTask{name: t.name, exited: exited}
	l.mu.Unlock()
	return errStillRunning
}

// strayTask is a startup task left running when the boot's budget was
// spent.
type strayTask struct {
	name   string
	exited <-chan struct{}
}

// warnStrayStartup names, at exit, a startup task the budget left running
// that is still running.
func (l *Lifecycle) warnStrayStartup() {
	l.mu.Lock()
	st := l.strayStartup
	l.mu.Unlock()
	if st == nil {
		return
	}
	select {
	case <-st.exited:
	default:
		l.log.Warn("lameduck: startup task "+st.name+" is still running at exit; it ignored its context", "task", st.name)
	}
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
// AddStartupTask returns an error once Run has started (the Lifecycle is
// already running), and for a nil fn, more than one Retry or a negative
// field in one.
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
		return errAlreadyRunning
	}
	l.startup = append(l.startup, t)
	return nil
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
