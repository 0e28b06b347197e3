package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// checkState is one registered check and its ping in flight.
//
// The state machine, per check:
//
//   - no ping in flight: a probe launches one under a context whose
//     deadline is the probe's start plus the check's timeout;
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
	maxAge      time.Duration // effective MaxAge, 0 for none; immutable
	timeoutText string        // body text of a timeout; immutable
	c           *Checker

	mu     sync.Mutex
	cur    *flight // guarded by mu: the ping in flight or captive; nil when none
	last   Outcome // guarded by mu: the outcome last logged; "" before the first
	result Result  // guarded by mu: the last verdict, when maxAge > 0; Time zero before the first
}

// flight is one call of a check's Func, shared by every probe that joins it.
//
// The flights a probe launches are allocated together (one slice per
// probe) and run by one goroutine of the Checker's, one after another,
// while each returns at once; the probe hands those still waiting to
// goroutines of their own as soon as that goroutine blocks (see
// launch).
type flight struct {
	cs       *checkState
	ctx      pingCtx   // the Func's context: deadline start+timeout
	start    time.Time // when the probe launched it
	deadline time.Time // start + the check's timeout

	// claimed is set by the goroutine that runs the ping, before it calls
	// Func: exactly one does.
	claimed atomic.Bool
	// returned is set the instant Func returns or unwinds, before the
	// verdict is decided; an observer of the deadline that sees it waits
	// for the (imminent) verdict instead of deciding "timeout".
	returned atomic.Bool
	// decided is set, under checkState.mu, once verdict is written; read
	// verdict only after seeing it true.
	decided atomic.Bool
	// done is made by the first waiter that has to block, under
	// checkState.mu, and closed with the decision; nil while nobody waits.
	done    chan struct{}
	verdict Result
}

// doneChan returns a channel closed at f's decision, making it if needed,
// or nil when f is decided already. The caller holds cs.mu.
func (f *flight) doneChanLocked() chan struct{} {
	if f.decided.Load() {
		return nil
	}
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

// decideLocked publishes v as f's verdict and, with MaxAge, keeps it as the
// check's last result. The caller holds cs.mu.
func (f *flight) decideLocked(v Result) {
	f.verdict = v
	f.decided.Store(true)
	if f.done != nil {
		close(f.done)
	}
	if f.cs.maxAge > 0 && !v.Time.Before(f.cs.result.Time) {
		f.cs.result = v
	}
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

// arrive is a probe's arrival at the check, at now (the probe's start).
// It returns the flight to wait on: one in flight to join, or a new one,
// taken from *batch (made with room for room flights on first use) and not
// yet running (see launch); or a result to report at once
// (answered): "stalled" when the check is captive, or, with MaxAge and
// reuse, the last verdict when no ping is in flight and it is younger than
// MaxAge.
func (cs *checkState) arrive(parent context.Context, now time.Time, batch *[]flight, room int, reuse bool) (f *flight, res Result, answered bool) {
	cs.mu.Lock()
	if f = cs.cur; f != nil {
		returned := f.returned.Load()
		switch {
		case f.decided.Load():
			// Decided while cs.cur is still f: the verdict was a timeout.
			if !returned {
				return nil, cs.stalledUnlock(f, now, nil, false), true
			}
			// The captive ping has just returned and is leaving; it is
			// captive no more: ping afresh.
		case returned || now.Before(f.deadline) || f.returned.Load():
			// In progress within its deadline, or returned and publishing
			// its result: join it. (returned is read again after the
			// deadline test: the ping may have returned in between, and
			// then it is no timeout.)
			cs.mu.Unlock()
			return f, Result{}, false
		default:
			// Past its deadline, not returned, and nobody waiting has
			// decided yet: decide now.
			timedOut := cs.decideTimeoutLocked(f, now)
			return nil, cs.stalledUnlock(f, now, timedOut, true), true
		}
	}
	if r := cs.result; reuse && cs.maxAge > 0 && !r.Time.IsZero() && now.Sub(r.Time) < cs.maxAge {
		// A result younger than MaxAge, and no ping in flight: read it.
		cs.mu.Unlock()
		r.Cached, r.Age = true, max(now.Sub(r.Time), 0)
		return nil, r, true
	}
	if *batch == nil {
		*batch = make([]flight, 0, room)
	}
	n := len(*batch)
	*batch = (*batch)[:n+1] // within its capacity: earlier flights do not move
	f = &(*batch)[n]
	f.cs, f.start, f.deadline = cs, now, now.Add(cs.timeout)
	f.ctx.init(parent, f.deadline)
	cs.cur = f
	cs.mu.Unlock()
	return f, Result{}, false
}

// stalledUnlock builds the "stalled" result for a probe that found f
// captive. Called with cs.mu held, it releases it, then logs (timedOut
// first, when set) and reports the results: f's timeout first when this
// probe decided it (decided).
func (cs *checkState) stalledUnlock(f *flight, now time.Time, timedOut *logLine, decided bool) Result {
	res := Result{
		Name: cs.Name, Outcome: OutcomeStalled, Text: stalledWord(cs.c.opts.HideDetails),
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

// launch runs the flights a probe has just created (batch, in check name
// order): one goroutine takes them one after another, so that checks which
// return at once cost the probe one goroutine start, not one per check;
// meanwhile the probe yields its processor to that goroutine, and when it
// runs again (the goroutine has finished, or a check blocked it, or another
// processor took the probe) it hands every flight not yet started to a
// goroutine of its own. So checks still run concurrently: a check that
// blocks delays the others by no more than one scheduling round, and each
// keeps its own deadline, counted from the probe's start.
func launch(batch []flight) {
	go runFlights(batch)
	runtime.Gosched()
	for i := range batch {
		if f := &batch[i]; f.claimed.CompareAndSwap(false, true) {
			go f.cs.ping(f)
		}
	}
}

// runFlights runs, one after another, the flights of batch that no other
// goroutine has claimed.
func runFlights(batch []flight) {
	for i := range batch {
		if f := &batch[i]; f.claimed.CompareAndSwap(false, true) {
			f.cs.ping(f)
		}
	}
}

// ping calls Func once and publishes what happened, in a goroutine of the
// Checker's (see launch); it returns when Func returns.
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
	err = cs.Func(&f.ctx)
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
	cs.finish(f, OutcomePanic, panicText(pv, cs.c.opts.HideDetails), panicText(pv, false), pv, stack)
}

// failed finishes a ping whose Func returned err.
func (cs *checkState) failed(f *flight, err error) {
	deadline, msg, pv := describeErr(err, !time.Now().Before(f.deadline))
	if pv != nil {
		// The error itself panicked (a typed nil whose Error method reads
		// a field, say): that is the check's panic, and the process lives.
		pv = fmt.Sprintf("%v (in the Error method of the %T the check returned)", pv, err)
		stack := debug.Stack()
		cs.finish(f, OutcomePanic, panicText(pv, cs.c.opts.HideDetails), panicText(pv, false), pv, stack)
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
	if cs.c.opts.HideDetails {
		text = string(OutcomeError)
	}
	cs.finish(f, OutcomeError, text, logText, nil, nil)
}

// finish publishes the ping's result as its verdict unless a timeout was
// decided first, and frees the check's slot. A change of outcome is logged
// first, with no lock held, so the log says it before any probe answers
// with it; the line of a captive ping's late return comes after, and then
// the panic goes to the hook.
func (cs *checkState) finish(f *flight, o Outcome, text, logText string, pv any, stack []byte) {
	took := time.Since(f.start) // one monotonic read; the wall time follows from start
	now := f.start.Add(took)
	var line *logLine
	published := false
	cs.mu.Lock()
	if f.decided.Load() { // too late: the probes were told "timeout"
		// A ping that returned as its deadline passed honoured its context:
		// the timeout was its one transition. Only one that held on past
		// the deadline was captive, and its return is worth a line.
		if now.Sub(f.deadline) > captiveSlack {
			line = cs.lateLine(took, logText)
		}
	} else {
		if o != cs.last {
			if changed := cs.changedLocked(o, logText, stack); changed != nil {
				// Say the change before any probe reads it: unlocked (no
				// lock across I/O), and safely so, since returned is set
				// and nobody decides a timeout for f meanwhile.
				cs.mu.Unlock()
				cs.c.emit(changed)
				cs.mu.Lock()
			}
		}
		f.decideLocked(Result{Name: cs.Name, Outcome: o, Text: text, Critical: cs.Critical, Duration: took, Time: now})
		published = true
	}
	if cs.cur == f {
		cs.cur = nil
	}
	cs.mu.Unlock()
	f.ctx.release()
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
// context) ends; start is when the probe began, for the latter's text. tm
// is the probe's timer, made on first need and reused for its other
// flights.
func (cs *checkState) wait(ctx context.Context, f *flight, start time.Time, tm **time.Timer) Result {
	if f.decided.Load() {
		return f.verdict
	}
	cs.mu.Lock()
	done := f.doneChanLocked()
	cs.mu.Unlock()
	if done == nil {
		return f.verdict
	}
	if d := time.Until(f.deadline); d > 0 {
		if *tm == nil {
			*tm = time.NewTimer(d)
		} else {
			(*tm).Reset(d)
		}
		select {
		case <-done:
			return f.verdict
		case <-(*tm).C:
			// The ping's deadline passed: decide below.
		case <-ctx.Done():
			if f.decided.Load() {
				return f.verdict
			}
			// This caller's own deadline came first. The ping goes on for
			// the probes that share it; this probe reports how long it
			// waited. Not logged: the check did nothing new.
			now := time.Now()
			d := roundWait(now.Sub(start))
			return Result{Name: cs.Name, Outcome: OutcomeTimeout, Text: timeoutText(d, cs.c.opts.HideDetails),
				Critical: cs.Critical, Duration: d, Time: now}
		}
	}
	cs.mu.Lock()
	if f.decided.Load() {
		cs.mu.Unlock()
		return f.verdict
	}
	if f.returned.Load() {
		// Func has returned; its goroutine is publishing the result
		// with no blocking step left. A ping that completed is never
		// published as a timeout.
		cs.mu.Unlock()
		<-done
		return f.verdict
	}
	line := cs.decideTimeoutLocked(f, time.Now())
	cs.mu.Unlock()
	cs.c.emit(line)
	if h := cs.c.opts.OnResult; h != nil {
		h(f.verdict)
	}
	return f.verdict
}

// decideTimeoutLocked makes "timeout" the verdict of f, which has not
// returned by its deadline. From now on f is captive.
func (cs *checkState) decideTimeoutLocked(f *flight, now time.Time) *logLine {
	f.decideLocked(Result{Name: cs.Name, Outcome: OutcomeTimeout, Text: cs.timeoutText,
		Critical: cs.Critical, Duration: cs.timeout, Time: now})
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
	now := time.Now()
	for _, e := range reg.entries { // sorted by name
		if cs := e.check; cs != nil {
			cs.mu.Lock()
			if f := cs.cur; f != nil && !f.returned.Load() && (f.decided.Load() || !now.Before(f.deadline)) {
				names = append(names, cs.Name)
			}
			cs.mu.Unlock()
		}
	}
	return names
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
