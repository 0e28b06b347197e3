package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// checkState is one registered check and its ping in flight.
//
// The state machine, per check:
//
//   - no ping in flight: a probe launches one, in a goroutine of its own,
//     under a context whose deadline is start+timeout;
//   - a ping in flight and not past its deadline: a probe joins it and
//     reads the same verdict (single-flight: a kubelet tick next to an
//     operator's curl reads one answer, and neither is told "stalled");
//   - a ping past its deadline without an answer: the first observer
//     decides the verdict "timeout" for everyone sharing the ping; the ping
//     is now captive, and probes that arrive while it is report "stalled"
//     without launching the check again;
//   - the captive ping returns: the slot is freed; the next probe pings
//     afresh.
//
// A ping's verdict is decided exactly once, under mu, by whichever comes
// first: the ping's own return (its result) or an observer of the deadline
// that finds the ping has not returned ("timeout"). That single decision is
// one atomic observation: a ping that has returned is
// never published as a timeout, and all sharers read the same verdict.
type checkState struct {
	Check                     // immutable
	timeout     time.Duration // effective deadline; immutable
	timeoutText string        // body text of a timeout; immutable
	c           *Checker

	mu   sync.Mutex
	cur  *flight // guarded by mu: the ping in flight or captive; nil when none
	last Outcome // guarded by mu: the outcome last logged; "" before the first
}

// flight is one call of a check's Func, shared by every probe that joins it.
type flight struct {
	ctx    context.Context // the ping's context, deadline start+timeout
	cancel context.CancelFunc
	start  time.Time

	// returned is set the instant Func returns or unwinds, before the
	// verdict is decided; an observer of the deadline that sees it waits
	// for the (imminent) verdict instead of deciding "timeout".
	returned atomic.Bool
	// decided is closed once verdict is set.
	decided chan struct{}
	// verdict is written once, under checkState.mu, before decided is
	// closed; read it only after <-decided.
	verdict Result
}

// isDeadline reports whether err says a deadline passed: it wraps
// context.DeadlineExceeded, or it is a net-style error whose Timeout method
// says so.
func isDeadline(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// describeErr reads err, which the check's code wrote and which may panic
// in its Error, Is, As or Timeout method: deadline reports whether it says
// a deadline passed (asked only when the ping's own deadline has), msg is
// its text, and pv the value of a panic it raised.
func describeErr(err error, pastDeadline bool) (deadline bool, msg string, pv any) {
	defer func() {
		if v := recover(); v != nil {
			deadline, msg, pv = false, "", v
		}
	}()
	if pastDeadline && isDeadline(err) {
		return true, "", nil
	}
	return false, err.Error(), nil
}

// goexitValue is the panic value reported for a check that called
// runtime.Goexit (t.FailNow in a test double, say).
const goexitValue = "runtime.Goexit called by the check"

// arrive is a probe's arrival at the check. It returns the flight to wait
// on, or, when the check is captive, the "stalled" result to report at once.
func (cs *checkState) arrive(parent context.Context) (f *flight, stalled Result, isStalled bool) {
	cs.mu.Lock()
	var timedOut *logLine
	if f = cs.cur; f != nil {
		returned := f.returned.Load()
		select {
		case <-f.decided:
			// Decided while cs.cur is still f: the verdict was a timeout.
			if returned {
				// The captive ping has just returned and is leaving;
				// it is captive no more: ping afresh.
				f = nil
				break
			}
			return nil, cs.stalledUnlock(f, nil, false), true
		default:
			// Load returned again after the deadline check: the ping may
			// have returned in between, and then it is no timeout.
			if returned || f.ctx.Err() == nil || f.returned.Load() {
				// In progress within its deadline, or returned and
				// publishing its result: join it.
				cs.mu.Unlock()
				return f, Result{}, false
			}
			// Past its deadline, not returned, and nobody waiting has
			// decided yet: decide now.
			timedOut = cs.decideTimeoutLocked(f)
			return nil, cs.stalledUnlock(f, timedOut, true), true
		}
	}
	f = cs.launchLocked(parent)
	cs.mu.Unlock()
	return f, Result{}, false
}

// stalledUnlock builds the "stalled" result for a probe that found f
// captive. Called with cs.mu held, it releases it, then logs (timedOut
// first, when set) and reports the results: f's timeout first when this
// probe decided it (decided).
func (cs *checkState) stalledUnlock(f *flight, timedOut *logLine, decided bool) Result {
	now := time.Now()
	res := Result{
		Name: cs.Name, Outcome: OutcomeStalled, Text: stalledWord(cs.c.opts.HideErrors),
		Critical: cs.Critical, Duration: now.Sub(f.start), Time: now,
	}
	line := cs.noteLocked(res, stalledText, durationAttr("running_for", roundWait(res.Duration)))
	cs.mu.Unlock()
	cs.c.emit(timedOut)
	cs.c.emit(line)
	if h := cs.c.opts.OnResult; h != nil {
		if decided {
			h(f.verdict)
		}
		h(res)
	}
	return res
}

func stalledWord(hide bool) string {
	if hide {
		return string(OutcomeStalled)
	}
	return stalledText
}

// launchLocked starts a ping. The ping's context keeps parent's values (a
// trace, a logger) but not its cancellation: the probe that launched it may
// leave, and the probes that joined it still want the answer.
func (cs *checkState) launchLocked(parent context.Context) *flight {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cs.timeout)
	f := &flight{ctx: ctx, cancel: cancel, start: time.Now(), decided: make(chan struct{})}
	cs.cur = f
	go cs.ping(f)
	return f
}

// ping calls Func once and publishes what happened. It is the only
// goroutine a Checker starts; it ends when Func returns.
//
// A new goroutine starts on a small stack, and growing it costs more than
// the rest of a healthy ping: so the ok path keeps its frames small, and
// the text building of the failure paths sits in functions of their own.
func (cs *checkState) ping(f *flight) {
	var err error
	normal := false
	defer func() {
		f.returned.Store(true)
		if h := cs.c.testHookReturned; h != nil {
			h()
		}
		switch {
		case !normal:
			// recover is nil only for runtime.Goexit, since Go 1.21
			// turns panic(nil) into a *runtime.PanicNilError.
			cs.panicked(f, recover())
		case err != nil:
			cs.failed(f, err)
		default:
			cs.finish(f, OutcomeOK, string(OutcomeOK), string(OutcomeOK), nil, nil)
		}
	}()
	err = cs.Func(f.ctx)
	normal = true
}

// panicked finishes a ping whose Func panicked (pv) or called
// runtime.Goexit (pv nil). It runs in the deferred call, so the stack it
// captures still holds the panicking frames.
func (cs *checkState) panicked(f *flight, pv any) {
	if pv == nil {
		pv = goexitValue
	}
	stack := debug.Stack()
	cs.finish(f, OutcomePanic, panicText(pv, cs.c.opts.HideErrors), panicText(pv, false), pv, stack)
}

// failed finishes a ping whose Func returned err.
func (cs *checkState) failed(f *flight, err error) {
	deadline, msg, pv := describeErr(err, f.ctx.Err() != nil)
	if pv != nil {
		// The error itself panicked (a typed nil whose Error method reads
		// a field, say): that is the check's panic, and the process lives.
		pv = fmt.Sprintf("%v (in the Error method of the %T the check returned)", pv, err)
		stack := debug.Stack()
		cs.finish(f, OutcomePanic, panicText(pv, cs.c.opts.HideErrors), panicText(pv, false), pv, stack)
		return
	}
	if deadline {
		// A check that honours its context returns the deadline's error
		// at the deadline: that is a timeout, not an error.
		cs.finish(f, OutcomeTimeout, cs.timeoutText, timeoutText(cs.timeout, false), nil, nil)
		return
	}
	logText := detail(OutcomeError, msg, false)
	text := logText
	if cs.c.opts.HideErrors {
		text = string(OutcomeError)
	}
	cs.finish(f, OutcomeError, text, logText, nil, nil)
}

// finish publishes the ping's result as its verdict unless a timeout was
// decided first, frees the check's slot, then (with no lock held) logs and
// hands a panic to the hook.
func (cs *checkState) finish(f *flight, o Outcome, text, logText string, pv any, stack []byte) {
	now := time.Now()
	var line *logLine
	published := false
	cs.mu.Lock()
	select {
	case <-f.decided: // too late: the probes were told "timeout"
		// A ping that returned as its deadline passed honoured its context:
		// the timeout was its one transition. Only one that held on past
		// the deadline was captive, and its return is worth a line.
		if dl, ok := f.ctx.Deadline(); !ok || now.Sub(dl) > captiveSlack {
			line = cs.lateLine(now.Sub(f.start), logText)
		}
	default:
		v := &f.verdict
		v.Name, v.Outcome, v.Text, v.Critical = cs.Name, o, text, cs.Critical
		v.Duration, v.Time = now.Sub(f.start), now
		close(f.decided)
		published = true
		if o != cs.last {
			line = cs.changedLocked(o, logText, stack)
		}
	}
	if cs.cur == f {
		cs.cur = nil
	}
	cs.mu.Unlock()
	f.cancel()
	if line != nil {
		cs.c.emit(line)
	}
	if h := cs.c.opts.OnResult; h != nil && published {
		h(f.verdict) // written once, before decided was closed
	}
	if pv != nil {
		cs.c.reportPanic(cs.Name, pv, stack)
	}
}

// changedLocked records a published outcome that differs from the last
// one logged, and returns the line that says so (with the stack, for a
// panic).
func (cs *checkState) changedLocked(o Outcome, logText string, stack []byte) *logLine {
	if stack != nil {
		return transition(&cs.last, "check", cs.Name, cs.Critical, o, logText, slog.String("stack", string(stack)))
	}
	return transition(&cs.last, "check", cs.Name, cs.Critical, o, logText)
}

// captiveSlack is how long past its deadline a ping may return and still
// count as having honoured its context rather than as captive.
const captiveSlack = 100 * time.Millisecond

// lateLine is the line for a captive ping that returned after its
// verdict, "timeout", was out.
func (cs *checkState) lateLine(after time.Duration, logText string) *logLine {
	return &logLine{at: time.Now(), level: slog.LevelInfo,
		msg: "health: captive check returned; the next probe pings it afresh",
		attrs: []slog.Attr{slog.String("check", cs.Name), durationAttr("after", roundWait(after)),
			slog.String("result", logText)}}
}

// wait blocks until the flight's verdict, or until ctx (the probe's own
// context) ends; start is when the probe began, for the latter's text.
func (cs *checkState) wait(ctx context.Context, f *flight, start time.Time) Result {
	select {
	case <-f.decided:
		return f.verdict
	case <-f.ctx.Done():
		// The ping's deadline passed (or it returned and was canceled
		// after its verdict): decide below.
	case <-ctx.Done():
		select {
		case <-f.decided:
			return f.verdict
		default:
		}
		// This caller's own deadline came first. The ping goes on for
		// the probes that share it; this probe reports how long it
		// waited. Not logged: the check did nothing new.
		now := time.Now()
		d := roundWait(now.Sub(start))
		return Result{Name: cs.Name, Outcome: OutcomeTimeout, Text: timeoutText(d, cs.c.opts.HideErrors),
			Critical: cs.Critical, Duration: d, Time: now}
	}
	cs.mu.Lock()
	select {
	case <-f.decided:
		cs.mu.Unlock()
		return f.verdict
	default:
	}
	if f.returned.Load() {
		// Func has returned; its goroutine is publishing the result
		// with no blocking step left. A ping that completed is never
		// published as a timeout.
		cs.mu.Unlock()
		<-f.decided
		return f.verdict
	}
	line := cs.decideTimeoutLocked(f)
	cs.mu.Unlock()
	cs.c.emit(line)
	if h := cs.c.opts.OnResult; h != nil {
		h(f.verdict)
	}
	return f.verdict
}

// decideTimeoutLocked makes "timeout" the verdict of f, which has not
// returned by its deadline. From now on f is captive.
func (cs *checkState) decideTimeoutLocked(f *flight) *logLine {
	now := time.Now()
	f.verdict = Result{Name: cs.Name, Outcome: OutcomeTimeout, Text: cs.timeoutText,
		Critical: cs.Critical, Duration: cs.timeout, Time: now}
	close(f.decided)
	return cs.noteLocked(f.verdict, timeoutText(cs.timeout, false), durationAttr("timeout", cs.timeout))
}

// noteLocked records res's outcome as the check's state and returns the log
// line for the change, or nil when the outcome is the same as last time (or
// the first outcome is a pass).
func (cs *checkState) noteLocked(res Result, logText string, extra ...slog.Attr) *logLine {
	return transition(&cs.last, "check", cs.Name, cs.Critical, res.Outcome, logText, extra...)
}

// Captive returns the names of the checks whose ping has passed its
// deadline and not yet returned, sorted: each holds the one goroutine that
// Checker cannot end (its Func ignores its context). Probes report these
// checks "stalled" until their ping returns. Use it to name what is left
// running at shutdown or in a debug endpoint. It does not block probes for
// longer than a lock per check and is safe for concurrent use.
func (c *Checker) Captive() []string {
	reg := c.reg.Load()
	if reg == nil {
		return nil
	}
	var names []string
	for _, e := range reg.entries { // sorted by name
		if cs := e.check; cs != nil {
			cs.mu.Lock()
			if f := cs.cur; f != nil && !f.returned.Load() && (isClosed(f.decided) || f.ctx.Err() != nil) {
				names = append(names, cs.Name)
			}
			cs.mu.Unlock()
		}
	}
	return names
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// durationAttr is a log attribute for a duration, written as Go writes it
// ("1.5s"), the one form every lameduck log line uses for durations:
// slog's own duration value is a number of nanoseconds in JSON.
func durationAttr(key string, d time.Duration) slog.Attr { return slog.String(key, d.String()) }

// roundWait rounds how long a probe waited for its answer text: to the
// millisecond, or the microsecond below one.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
