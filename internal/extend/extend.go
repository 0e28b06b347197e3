// Package extend is how a package of this module built on the Lifecycle
// (package worker) attaches to one lameduck.Config what only it needs:
// settings of its own, default rules that replace the core's, drain modes,
// and the hooks its Lifecycle calls (a probe answerer, an in-flight
// counter, waits that hold the lame-duck window open). Package lameduck
// fills Attach when it is initialised, so it exports nothing for this.
//
// C is lameduck.Config and P is lameduck.Phase; the package cannot name
// them, since lameduck imports it.
package extend

import (
	"context"
	"time"

	"github.com/lameduck/lameduck/health"
)

// RunnerSettings are the names (after the prefix) of package worker's own
// settings. A process that is not a runner refuses them as a runner's,
// not as unknown names: they are real settings that do nothing there.
// worker's TestRunnerSettingsAreWorkersRows holds the list to its rows.
var RunnerSettings = []string{"EPOCH", "EPOCH_MISMATCH_DELAY", "FAILURE_BACKOFF", "FAILURE_BACKOFF_MAX", "FETCH_WAIT"}

// Extension is what one package adds to one Config. The zero value adds
// nothing. Its functions are called by the Config's resolution and by the
// Lifecycle made from it, as each field says.
type Extension[C, P any] struct {
	// Rows are settings of the extension's own, read after the core's and
	// listed with them (an unknown-variable error's "known" list, the
	// resolved Sources).
	Rows []Row
	// Rules are default rules asked before a core row's own, by the row's
	// name after the prefix ("DRAIN_TIMEOUT"): a rule fills the setting
	// and returns the rule that chose it, as Resolved.Sources records it,
	// or returns "" to leave the setting to the core's rule. src is the
	// resolution's Sources, for a rule that also chooses another setting.
	Rules map[string]func(c *C, src map[string]string) (rule string)
	// DrainModes, when set, are the only drain modes this process accepts
	// (the core's enum accepts them too); ModesProblem says so, for the
	// error refusing another one.
	DrainModes   []string
	ModesProblem string
	// Window, when set, names the lame-duck window in the budget's sum
	// ("runner drain bound"), and makes DrainTimeout its bound: the window
	// lasts while Waits run.
	Window string
	// Draining, when set, writes the log line at the signal from flip
	// (" — /readyz now 503,") and the window's bound.
	Draining func(flip string, bound time.Duration) string
	// LogAttrs, when set, adds key-value pairs to the startup budget line.
	LogAttrs func() []any
	// Answer, when set, is asked first on every liveness and readiness
	// probe: probe is the default path of the probe (PathLiveness or
	// PathReadiness, for /readyz/<check> too), phase the Lifecycle's phase.
	// It returns the report to render and true, or false to let the
	// Lifecycle answer. It is called concurrently and must only read
	// memory and return at once; a "phase" member is added to the
	// report's Fields unless it sets one.
	Answer func(probe string, phase P) (rep health.Report, answered bool)
	// InFlight, when set, counts work in flight that is not an HTTP
	// request (a runner's jobs), added to the in_flight of the sequence's
	// log lines. It must only read memory and return at once.
	InFlight func() int
	// Waits hold the lame-duck window open: each starts when the sequence
	// does, and the window ends no earlier than when all have returned
	// and no later than its bound, at which their contexts are cancelled.
	Waits []Wait
}

// Wait is one wait that holds the window open.
type Wait struct {
	Name string
	Fn   func(ctx context.Context) error
}

// Row is one setting of an extension, stored outside the Config: exactly
// one of Duration and Uint points to where its value lives. Its variable
// is the prefix + Name; a value the code set counts as "Config." + Field.
type Row struct {
	Name, Field string
	// Form is the accepted form, shown with every refusal.
	Form string
	// Doc says in one line of Markdown what the setting does, as
	// README.md's configuration table does.
	Doc string
	// Duration is a positive duration's place.
	Duration *time.Duration
	// Uint is a non-negative integer's place.
	Uint *uint64
	// Default, when set, fills the value left unset and returns the rule
	// that chose it.
	Default func() (rule string)
}

var attach any // func(*C, *Extension[C, P]), set by package lameduck

// Register is called once, by package lameduck as it is initialised, with
// the function that attaches an extension to a Config.
func Register[C, P any](f func(c *C, e *Extension[C, P])) { attach = f }

// Attach attaches e to c: c's resolution and the Lifecycle made from c
// (or from a copy of it) use e. A second call replaces the first.
func Attach[C, P any](c *C, e *Extension[C, P]) {
	attach.(func(*C, *Extension[C, P]))(c, e)
}

// MinDefaultTeardown is the least teardown a default derived from the
// grace period gives: a zero budget would cut every request at once.
const MinDefaultTeardown = time.Second

// GraceMargin is the part of the grace period a default teardown leaves
// unused, for the process to exit after Run returns and for the kubelet's
// own delays: a tenth of the grace period, at least 2s and at most 10s.
func GraceMargin(grace time.Duration) time.Duration {
	return min(max(grace/10, 2*time.Second), 10*time.Second)
}
