// Package extend is how a package of this module built on the Lifecycle
// (package worker) adds to one lameduck.Config what only it needs:
// settings of its own, default rules that replace the core's, drain modes,
// and the hooks its Lifecycle calls (a probe answerer, an in-flight
// counter, waits that hold the lame-duck window open).
//
// The design, in full: worker builds an *Extension and sets it in
// lameduck.Config.Extension before it calls lameduck.New or
// lameduck.Resolve; the Config's resolution and the Lifecycle made from it
// call the Extension's fields, as each says. Nothing is registered and
// nothing is global: a Config without one (a server's) is resolved and run
// by the core's rules alone. The package cannot name lameduck's types,
// since lameduck imports it: a default rule gets the Config's fields it
// reads and writes as Fields, and a probe answerer gets the phase as an
// int32 (a lameduck.Phase's value). Being internal, the type cannot be
// built outside this module: for every other module the field is nil, or
// copied from a Config that worker resolved.
package extend

import (
	"context"
	"time"

	"github.com/lameduck/lameduck/health"
)

// RunnerSettings returns the names (after the prefix) of package worker's
// own settings. A process that is not a runner refuses them as a runner's,
// not as unknown names: they are real settings that do nothing there.
// worker's TestRunnerSettingsAreWorkersRows holds the list to its rows.
func RunnerSettings() []string {
	return []string{"EPOCH", "EPOCH_MISMATCH_DELAY", "FAILURE_BACKOFF", "FAILURE_BACKOFF_MAX", "FETCH_WAIT"}
}

// Extension is what one package adds to one Config. The zero value adds
// nothing. Its functions are called by the Config's resolution and by the
// Lifecycle made from it, as each field says.
type Extension struct {
	// Rows are settings of the extension's own, read after the core's and
	// listed with them (an unknown-variable error's "known" list, the
	// resolved Sources).
	Rows []Row
	// Defaults are default rules asked before the core's own.
	Defaults Defaults
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
	// probe: liveness says which (readiness for /readyz/<check> too),
	// phase the Lifecycle's phase
	// (a lameduck.Phase's value: 0 starting, 1 serving, 2 draining, 3
	// stopping, 4 stopped). It returns the report to render and true, or
	// false to let the Lifecycle answer. It is called concurrently and must only read
	// memory and return at once; a "phase" member is added to the
	// report's Fields unless it sets one.
	Answer func(liveness bool, phase int32) (rep health.Report, answered bool)
	// InFlight, when set, counts work in flight that is not an HTTP
	// request (a runner's jobs), added to the in_flight of the sequence's
	// log lines. It must only read memory and return at once.
	InFlight func() int
	// Waits hold the lame-duck window open: each starts when the sequence
	// does, and the window ends no earlier than when all have returned
	// and no later than its bound, at which their contexts are cancelled.
	Waits []Wait
}

// Defaults are default rules for the core's settings, each asked before
// the core's own rule for the setting its field names, when the code and
// the environment left that setting unset (ProbeAddr for PROBE_ADDR, and so
// on). A rule fills its setting through f and returns the rule that chose
// it, as Resolved.Sources records it, or returns "" to leave the setting to
// the core's rule. A nil rule leaves it to the core's rule too.
type Defaults struct {
	ProbeAddr        func(f Fields) (rule string)
	DrainMode        func(f Fields) (rule string)
	ShutdownDelay    func(f Fields) (rule string)
	DrainTimeout     func(f Fields) (rule string)
	ShutdownTeardown func(f Fields) (rule string)
}

// Fields are the Config fields a default rule reads (as they are when it
// is asked: the defaults are chosen in the order of the rows) and writes,
// and the resolution's Sources, for a rule that also chooses another
// setting (a rule records the rule of its own setting by returning it).
type Fields struct {
	Env, EnvPrefix                 string
	TerminationGrace, PreStopDelay time.Duration

	ProbeAddr, DrainMode                          *string
	ShutdownDelay, DrainTimeout, ShutdownTeardown *time.Duration

	// Sources is the resolution's, keyed by a setting's name after the
	// prefix ("SHUTDOWN_TEARDOWN").
	Sources map[string]string
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
