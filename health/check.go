package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCheckTimeout is the deadline of a check whose Timeout is zero when
// CheckerOptions.DefaultTimeout is zero too: 1s. A probe answers in its
// slowest check's time, so set the readiness probe's timeoutSeconds above
// it (see Check.Timeout).
const DefaultCheckTimeout = time.Second

// ErrUnknownCheck is wrapped by the error [Checker.Run] returns when only or
// exclude names no registered check or gate; [Checker.ServeReadiness] answers
// it with a 404. Branch on it with errors.Is.
var ErrUnknownCheck = errors.New("health: unknown check")

// Check is one dependency that readiness pings: a name, a function, a
// criticality and a deadline (docs/probes-and-shutdown.md, "Readiness checks"; the Kubernetes API server's healthz.HealthChecker is the same
// idea without the criticality).
//
// Checks run for readiness only, never for liveness: a dependency outage
// must not restart every pod.
type Check struct {
	// Name identifies the check in bodies ("checks":{"db":"ok"}), in the
	// per-check path /readyz/<name> and in ?exclude=<name>. It matches
	// [a-z0-9_.-]+, is not "." or "..", and is unique among the checks and
	// gates of one Checker.
	Name string
	// Func pings the dependency. It returns nil when the dependency is
	// usable. ctx carries the check's deadline (Timeout); Func should return
	// when ctx is done, but the probe does not rely on it: a Func that
	// ignores ctx is reported "timeout" at the deadline and "stalled"
	// afterwards, and is not called again until it returns. A panic in Func
	// is recovered and reported "panic: <value>". Func is called from a
	// goroutine of the Checker's own, never twice at once. ctx carries the
	// values of the probe that launched the ping (a trace, a logger) but not
	// its cancellation: the probes that share the ping still want the
	// answer after the first one leaves. A Func that returns ctx's deadline
	// error at the deadline is reported "timeout", like one that never
	// returns.
	Func func(ctx context.Context) error
	// Critical decides what a failure does to readiness: true answers 503
	// "failed"; false answers 200 "degraded", because a dependency that all
	// replicas share would otherwise take every pod out of the Service at
	// once and turn a partial degradation into a total outage.
	// Mark a check critical only when the pod cannot serve without it.
	Critical bool
	// Timeout is the check's deadline, counted from the start of its ping.
	// Zero means CheckerOptions.DefaultTimeout (itself 1s when zero);
	// negative is an error from AddCheck. Keep it well below the readiness
	// probe's timeoutSeconds, so the kubelet never aborts a probe that was
	// about to report a merely degraded backend
	// (https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/).
	Timeout time.Duration
	// MaxAge is how old a result may be and still answer a probe: a probe
	// that comes within MaxAge of the last answered ping (its result's
	// Time: when it returned, or timed out) reads that result instead of
	// pinging; a probe after it pings, single-flight as always. So a
	// dependency sees at most one ping per MaxAge from this process,
	// whatever the number of probers (docs/probes-and-shutdown.md, "A ping
	// budget per dependency"). A failing result is held no longer than a
	// passing one; a ping in flight is never answered from an older result,
	// so a check that is timing out or stalled is reported so, never from
	// an earlier "ok". A result read this way carries Cached and its Age.
	// The age is judged when the probe's report is built: a result that
	// reaches MaxAge while the probe waits for its other checks is not
	// served; the check is pinged again for that probe.
	//
	// Zero means CheckerOptions.DefaultMaxAge (itself zero: ping on every
	// probe); negative means ping on every probe whatever the default.
	// Keep it well under the readiness probe's periodSeconds ×
	// failureThreshold, or an outage is noticed that much later.
	MaxAge time.Duration
	// Refresh, with a MaxAge above zero, also pings the check on its own
	// schedule while [Checker.RunRefresh] runs (lameduck runs it while the
	// pod serves and stops it at the shutdown signal): about every MaxAge,
	// at an offset drawn at random so that a fleet of pods does not ping
	// in step, so that probes read a fresh result and cost no ping. Without
	// MaxAge it does nothing.
	Refresh bool
}

// Gate is a readiness predicate over in-memory state the application owns,
// for readiness that depends on what the process knows rather than on
// something it must ping — "this backend group's consensus set is non-empty
// and its latest block is above 0".
//
// A failing gate fails readiness like a critical check (503 "failed"). A
// gate that is not applicable (a backend group without consensus, say) is
// skipped and passes.
type Gate struct {
	// Name follows the rules of Check.Name and shares its namespace.
	Name string
	// Func reports the gate's state. It is called synchronously on every
	// probe that includes the gate, concurrently for concurrent probes, with
	// no deadline: it must only read memory (an atomic, a mutex-guarded
	// field) and return at once. A panic is recovered and reported "panic:
	// <value>", failing readiness.
	Func func() GateResult
}

// GateResult is what a [Gate] says in one probe.
type GateResult struct {
	// Applicable false means the gate does not apply to this process right
	// now; it is reported "skipped" (with Reason, if any) and passes.
	Applicable bool
	// OK true means the gate holds; it is reported "ok". When Applicable is
	// true and OK false, readiness fails: "failed: <Reason>".
	OK bool
	// Reason says why, in a few words ("consensus group is empty"). It is
	// redacted like error text and hidden under HideDetails.
	Reason string
}

// CheckerOptions configures a [Checker]. The zero value is usable: 1s
// deadlines, no panic hook, slog.Default(), error text shown (redacted).
type CheckerOptions struct {
	// DefaultTimeout is the deadline of a check whose Timeout is zero,
	// fixed when the check is added. Zero means 1s (DefaultCheckTimeout,
	// under the probe's timeoutSeconds); negative makes AddCheck return an error. lameduck fills it
	// from LAMEDUCK_CHECK_TIMEOUT.
	DefaultTimeout time.Duration
	// DefaultMaxAge is the MaxAge of a check whose MaxAge is zero, fixed
	// when the check is added. Zero means every probe pings; negative makes
	// AddCheck return an error. lameduck fills it from
	// LAMEDUCK_CHECK_MAX_AGE.
	DefaultMaxAge time.Duration
	// OnPanic, when set, receives every panic recovered from a check or a
	// gate (or from the Error method of the error a check returned): the
	// check's name, the value passed to panic (for a check that called
	// runtime.Goexit, a string saying so) and the goroutine's stack. It is
	// not called again for a check while an earlier call for that check is
	// still running, so a hook that blocks costs one goroutine, not one per
	// probe: a panic that comes meanwhile is handed over when that call
	// returns (of several, the latest; the others are still logged and
	// reported in bodies).
	// Wire it to the error tracker. It is called at most once per panic, from a goroutine that
	// ran the check, after the probes waiting on that ping have their
	// answer, and never with a lock held. It must not block for long; a
	// panic inside OnPanic is recovered and logged.
	OnPanic func(check string, value any, stack []byte)
	// Logger receives one line per state change of a check or gate (ok →
	// error, error → ok, → timeout, → stalled, → panic, a captive ping's
	// late return), never one line per probe. Nil means slog.Default() at
	// the time of the line.
	Logger *slog.Logger
	// OnResult, when set, receives every verdict of a check: once per ping
	// when its outcome is decided (ok, error, panic, or timeout at its
	// deadline), and once per probe that finds the check's earlier ping
	// captive (stalled). Results of gates are not reported, nor a result
	// read again within a check's MaxAge (it was reported when decided). It is for
	// metrics (a status gauge, a duration histogram): it is called
	// synchronously, never with a lock held, from the ping's goroutine or
	// the probe's, concurrently for different checks, so it must be safe for
	// concurrent use and return at once. Nil costs nothing.
	OnResult func(Result)
	// HideDetails, when true, makes bodies carry the outcome word alone
	// ("error", "timeout", "panic", "stalled", "failed", "skipped") and
	// never a check's details (error, panic or gate text), for services
	// whose probes are reachable by people who must not learn about the
	// backends; [Info.HideDetails] does the same per handler. Logs still
	// carry the (redacted) details.
	HideDetails bool
}

// Checker runs the readiness checks and gates of one process: concurrently,
// each under its own deadline, sharing one in-flight ping per check between
// overlapping probes, never relaunching a check whose earlier ping is still
// captive, and recovering panics (docs/probes-and-shutdown.md, "Readiness checks").
//
// The zero value is a Checker with zero [CheckerOptions] and no checks; use
// [NewChecker] to set options. A Checker must not be copied after first use.
// All methods are safe for concurrent use, including AddCheck while probes
// run: a probe sees the checks added before it started.
//
// Goroutines: a probe that launches pings starts one goroutine, which runs
// them one after another while each returns at once, and one more for each
// ping still waiting when a check blocks that goroutine (so checks run
// concurrently); each ends when its last check's Func returns. A Checker
// starts none at rest and none per waiting probe; so at most one goroutine
// per check outlives its probe, and only while that check's Func ignores
// its context.
type Checker struct {
	opts CheckerOptions // read-only after NewChecker

	// Tests only (export_test.go); nil otherwise.
	testHookWait     func() // in each probe, after launching pings, before waiting
	testHookReturned func() // in each ping, after Func returned, before publishing

	mu  sync.Mutex               // serialises writers of reg
	reg atomic.Pointer[registry] // copy-on-write; nil means empty
	// refreshWake wakes RunRefresh when a check it should refresh is
	// added; capacity 1, made on first use. Guarded by mu.
	refreshWake chan struct{}

	hooking sync.Map // check name → *hookSlot: its OnPanic calls, one at a time

	serveBufs serveBufPool    // ServeReadiness's buffers
	hdr       preparedHeaders // ServeReadiness's header values
}

// registry is an immutable snapshot of the registered checks and gates.
type registry struct {
	entries []*entry       // sorted by name
	byName  map[string]int // name → index in entries
}

// entry is one check or gate; exactly one of check and gate is set.
type entry struct {
	name  string
	check *checkState
	gate  *gateState
}

// NewChecker returns a Checker with the given options and no checks.
func NewChecker(opts CheckerOptions) *Checker {
	return &Checker{opts: opts}
}

func (c *Checker) logger() *slog.Logger {
	if c.opts.Logger != nil {
		return c.opts.Logger
	}
	return slog.Default()
}

// AddCheck registers ch. It returns an error, and registers nothing, when
// ch.Name is empty, does not match [a-z0-9_.-]+, is "." or "..", or is
// already the name of a check or gate; when ch.Func is nil; when ch.Timeout
// is negative; or when ch.Timeout (ch.MaxAge) is zero and
// CheckerOptions.DefaultTimeout (DefaultMaxAge) is negative. The error
// begins "health:" and names the field, the value and the fix.
//
// Probes that start after AddCheck returns include the check. Checks cannot
// be removed; exclude them per request with ?exclude=<name>.
func (c *Checker) AddCheck(ch Check) error {
	if ch.Func == nil {
		return fmt.Errorf("health: Check{Name: %q}.Func is nil; give the check a func(context.Context) error", ch.Name)
	}
	if ch.Timeout < 0 {
		return fmt.Errorf("health: Check{Name: %q}.Timeout=%v is negative; use a positive duration, or 0 for the Checker's default", ch.Name, ch.Timeout)
	}
	timeout := ch.Timeout
	if timeout == 0 {
		timeout = c.opts.DefaultTimeout
		if timeout < 0 {
			return fmt.Errorf("health: CheckerOptions.DefaultTimeout=%v is negative; use a positive duration, or 0 for %v", timeout, DefaultCheckTimeout)
		}
		if timeout == 0 {
			timeout = DefaultCheckTimeout
		}
	}
	maxAge := ch.MaxAge
	if maxAge == 0 {
		maxAge = c.opts.DefaultMaxAge
		if maxAge < 0 {
			return fmt.Errorf("health: CheckerOptions.DefaultMaxAge=%v is negative; use a positive duration, or 0 to ping on every probe", maxAge)
		}
	}
	cs := &checkState{
		Check:       ch,
		timeout:     timeout,
		maxAge:      max(maxAge, 0),
		c:           c,
		timeoutText: timeoutText(timeout, c.opts.HideDetails),
	}
	return c.add(&entry{name: ch.Name, check: cs}, "Check")
}

// AddGate registers g. It returns an error, and registers nothing, when
// g.Name breaks the rules of [Check].Name (shared with the checks) or g.Func
// is nil. Probes that start after AddGate returns include the gate.
func (c *Checker) AddGate(g Gate) error {
	if g.Func == nil {
		return fmt.Errorf("health: Gate{Name: %q}.Func is nil; give the gate a func() health.GateResult", g.Name)
	}
	return c.add(&entry{name: g.Name, gate: &gateState{Gate: g, c: c}}, "Gate")
}

func (c *Checker) add(e *entry, kind string) error {
	if err := validName(e.name); err != nil {
		return fmt.Errorf("health: %s{Name: %q}: %w", kind, e.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.reg.Load()
	if old == nil {
		old = &registry{}
	}
	if _, dup := old.byName[e.name]; dup {
		return fmt.Errorf("health: %s{Name: %q}: a check or gate of that name is already registered; names must be unique", kind, e.name)
	}
	entries := make([]*entry, 0, len(old.entries)+1)
	entries = append(entries, old.entries...)
	i, _ := slices.BinarySearchFunc(entries, e.name, func(x *entry, name string) int { return strings.Compare(x.name, name) })
	entries = slices.Insert(entries, i, e)
	byName := make(map[string]int, len(entries))
	for i, x := range entries {
		byName[x.name] = i
	}
	c.reg.Store(&registry{entries: entries, byName: byName})
	if cs := e.check; cs != nil && cs.Refresh && cs.maxAge > 0 {
		select { // RunRefresh looks at the registry again
		case c.refreshWakeLocked() <- struct{}{}:
		default:
		}
	}
	return nil
}

// refreshWakeLocked returns refreshWake, making it on first use. The
// caller holds c.mu.
func (c *Checker) refreshWakeLocked() chan struct{} {
	if c.refreshWake == nil {
		c.refreshWake = make(chan struct{}, 1)
	}
	return c.refreshWake
}

func validName(name string) error {
	if name == "" {
		return errors.New("the name is empty; use [a-z0-9_.-]+, such as \"db\" or \"cache.redis\"")
	}
	if name == "." || name == ".." {
		return errors.New("the name is a path element; use [a-z0-9_.-]+ with a letter or digit")
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9', b == '_', b == '.', b == '-':
		default:
			return fmt.Errorf("the name has %q at byte %d; use [a-z0-9_.-]+, as the name is a URL path element (/readyz/<name>)", b, i)
		}
	}
	return nil
}

// Names returns the names of the registered checks and gates, sorted. The
// slice is the caller's.
func (c *Checker) Names() []string {
	reg := c.reg.Load()
	if reg == nil {
		return nil
	}
	names := make([]string, len(reg.entries))
	for i, e := range reg.entries {
		names[i] = e.name
	}
	return names
}
