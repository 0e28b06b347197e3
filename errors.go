package lameduck

import (
	"errors"
)

// ErrStartupFailed is wrapped by the error Run returns when a startup task
// fails. The process never reported ready.
var ErrStartupFailed = errors.New("startup failed")

// errInterrupted is runStartup's answer when the shutdown sequence started
// before the boot finished: not a failure, but not a finished boot either.
var errInterrupted = errors.New("lameduck: startup interrupted by shutdown")

// ErrAlreadyRunning is returned by a second call to Run, and by what may
// only be registered before Run (AddServer, AddServerFuncs, AddStartupTask)
// once Run has started. Registrations refused
// because the shutdown sequence has started return ErrShuttingDown.
var ErrAlreadyRunning = errors.New("lameduck: the Lifecycle is already running")

// ErrShuttingDown is wrapped by the refusal of what the shutdown sequence,
// once started, no longer takes: GoLoop (a loop would run on an
// already-cancelled context), GoWrite once the background join is over
// (nobody is left to wait for the write; the error's text says so), and
// AddTeardownHook and AddCloser (the sequence has already read its steps).
// The work was not started: a caller records it as deferred, to its
// reconciliation sweep say (docs/probes-and-shutdown.md, "Teardown: hooks,
// HTTP drain, background join, closers"). What may only be registered
// before Run (AddServer, AddServerFuncs, AddStartupTask) returns
// ErrAlreadyRunning instead.
var ErrShuttingDown = errors.New("lameduck: shutting down: the shutdown sequence has started")

// errJoined is GoWrite's and GoLoop's refusal once the background join is
// over; it wraps ErrShuttingDown.
var errJoined error = joinedError{}

type joinedError struct{}

func (joinedError) Error() string { return "lameduck: the background join is over: no new work" }
func (joinedError) Unwrap() error { return ErrShuttingDown }

// ErrInvalidConfig is wrapped by every error [New] returns for a bad
// setting, whether it came from a Config field or an environment variable.
// The error's text names the setting, the value and the fix.
var ErrInvalidConfig = errors.New("invalid configuration")
