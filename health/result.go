package health

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is the first word of a check's or gate's result text: what
// happened to it in one probe (docs/probes-and-shutdown.md, "Readiness
// checks"); "failed" and "skipped" are for readiness gates only.
type Outcome string

const (
	// OutcomeOK: the check returned nil within its deadline, or the gate
	// held. Text "ok".
	OutcomeOK Outcome = "ok"
	// OutcomeError: the check returned an error within its deadline. Text
	// "error: <redacted error text>".
	OutcomeError Outcome = "error"
	// OutcomePanic: the check (or gate) panicked, or called
	// runtime.Goexit. Text "panic: <redacted value>". The stack goes to
	// CheckerOptions.OnPanic and the log, never into a body.
	OutcomePanic Outcome = "panic"
	// OutcomeTimeout: the ping had not answered when its deadline passed.
	// Text "timeout: no answer within <d>", d being the check's timeout (or
	// how long this caller waited, when the caller's own context ended
	// first).
	OutcomeTimeout Outcome = "timeout"
	// OutcomeStalled: an earlier probe's ping passed its deadline and has
	// still not returned, so the check was not launched again. Text
	// "stalled: an earlier probe's ping has not returned".
	OutcomeStalled Outcome = "stalled"
	// OutcomeFailed: a gate's predicate did not hold. Text
	// "failed: <redacted reason>", or "failed" without a reason.
	OutcomeFailed Outcome = "failed"
	// OutcomeSkipped: a gate declared itself not applicable (a backend group
	// without consensus, say). It passes. Text
	// "skipped: <reason>", or "skipped".
	OutcomeSkipped Outcome = "skipped"
)

// Passing reports whether the outcome lets readiness pass: true for
// [OutcomeOK] and [OutcomeSkipped], false for every other word.
func (o Outcome) Passing() bool { return o == OutcomeOK || o == OutcomeSkipped }

// stalledText is the text of a check whose earlier ping is still captive;
// docs/probes-and-shutdown.md quotes it.
const stalledText = "stalled: an earlier probe's ping has not returned"

// maxTextBytes bounds the error, panic or reason text that reaches a body or
// a log line; longer texts are cut and end in "…".
const maxTextBytes = 1024

// Result is one check's or gate's answer within one probe. It is a value,
// built per probe (or shared by the probes that shared one ping) and never
// updated afterwards.
type Result struct {
	// Name is the check's or gate's name.
	Name string
	// Outcome is the result's first word.
	Outcome Outcome
	// Text is what the body shows: the outcome word, then for failures ": "
	// and the redacted detail ("error: dial tcp 10.0.0.7:5432: connection
	// refused"). Under CheckerOptions.HideDetails it is the word alone. It is
	// the value of Report.Checks[Name].
	Text string
	// Critical is true for a critical check and for every gate: when it is
	// failing, readiness is 503 "failed"; otherwise 200 "degraded".
	Critical bool
	// Gate is true when the result comes from a [Gate] rather than a
	// [Check].
	Gate bool
	// Duration is how long the ping ran when it answered (ok, error, panic);
	// how long the probe waited for a timeout; how long the captive ping has
	// been running for stalled; zero for gates.
	Duration time.Duration
	// Time is when the answer was observed (wall clock, for the
	// "time" member of application/health+json): for a result read from an
	// earlier ping (Cached), when that ping answered.
	Time time.Time
	// Cached is true when the result was read from an earlier ping, within
	// the check's MaxAge when the probe's report was built, rather than from
	// a ping that ran for this probe.
	Cached bool
	// Age is how old a Cached result was when the probe's report was built
	// (once it had waited for its pings); zero otherwise. The verbose and
	// application/health+json bodies show it.
	Age time.Duration
}

// detail builds "<word>: <text>", redacted, on one line and bounded, or the
// word alone when hide is set or text is empty.
func detail(o Outcome, text string, hide bool) string {
	if hide || text == "" {
		return string(o)
	}
	text = Redact(text)
	// One line of printable UTF-8: the verbose report is text/plain, read
	// in terminals, where a control sequence from an error must not act.
	text = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(text, "\uFFFD"))
	if len(text) > maxTextBytes {
		cut := maxTextBytes
		for cut > 0 && !isRuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	return string(o) + ": " + text
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// timeoutText is the text of a ping that had no answer within d.
func timeoutText(d time.Duration, hide bool) string {
	if hide {
		return string(OutcomeTimeout)
	}
	return fmt.Sprintf("timeout: no answer within %v", d)
}

// panicText renders a recovered panic value the way the body shows it.
// fmt.Sprint calls Error or String and survives a method that panics itself.
func panicText(v any, hide bool) string {
	return detail(OutcomePanic, fmt.Sprint(v), hide)
}
