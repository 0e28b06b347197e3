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

// errAlreadyRunning is returned by a second call to Run, and by what may
// only be registered before Run (AddServer, AddServerFuncs, AddStartupTask)
// once Run has started: a mistake in the program's order, which a caller
// fixes rather than branches on. Registrations refused because the
// shutdown sequence has started return ErrShuttingDown.
var errAlreadyRunning = errors.New("lameduck: the Lifecycle is already running")

// ErrShuttingDown is returned by what the shutdown sequence, once started,
// no longer takes: GoLoop (a loop would run on an already-cancelled
// context), AddTeardownHook and AddCloser (the sequence has already read
// its steps); and, once the background join is over, wrapped by the
// refusal of GoWrite and GoLoop (nobody is left to wait for the work; the
// error's text says so).
// The work was not started: a caller records it as deferred, to its
// reconciliation sweep say (docs/probes-and-shutdown.md, "Teardown: hooks,
// HTTP drain, background join, closers"). What may only be registered
// before Run (AddServer, AddServerFuncs, AddStartupTask) returns an error
// saying the Lifecycle is already running instead.
var ErrShuttingDown = errors.New("lameduck: shutting down: the shutdown sequence has started")

// errJoined is GoWrite's and GoLoop's refusal once the background join is
// over; it wraps ErrShuttingDown.
var errJoined error = joinedError{}

type joinedError struct{}

func (joinedError) Error() string { return "lameduck: the background join is over: no new work" }
func (joinedError) Unwrap() error { return ErrShuttingDown }
