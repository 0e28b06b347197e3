package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of the lameduck command.
const (
	// exitOK: the command did what it was asked; for demo, the drain
	// finished without cutting anything.
	exitOK = 0
	// exitFailure: the command ran and failed (a bad LAMEDUCK_* variable, a
	// listener that could not bind, a drain that had to cut), already
	// logged.
	exitFailure = 1
	// exitUsage: the command line itself is wrong (an unknown command or
	// flag, a bad flag value, a missing or extra argument); nothing ran.
	// The message points to --help, as the BSD sysexits and Go's flag
	// package do with 2.
	exitUsage = 2
)

// codeError is an outcome already reported on stdout that sets an exit
// code of its own: `lameduck vet` judging no container (docs/vet.md).
type codeError struct {
	error
	code int
}

func (e codeError) Unwrap() error { return e.error }

// usageError is a mistake in the command line: main prints it, points to
// the command's --help and exits 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// usagef returns a usageError with a formatted message.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitError is an error that has already been logged; main only sets the
// exit code (1).
type exitError struct{ error }

func (e exitError) Unwrap() error { return e.error }

// errorLines flattens err into one message per line: every error joined
// with errors.Join becomes its own line, and a message that itself spans
// lines is split, so no line carries a newline. A leading "lameduck: " is
// dropped; the caller adds its own prefix once.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, errorLines(e)...)
		}
		return out
	}
	if u, ok := err.(usageError); ok {
		return errorLines(u.error)
	}
	var out []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "lameduck:")); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// printErrors writes each of err's messages on its own line, prefixed
// "lameduck: ".
func printErrors(w io.Writer, err error) {
	for _, l := range errorLines(err) {
		fmt.Fprintln(w, "lameduck: "+l)
	}
}

// logErrors logs a failure made of several errors: with the JSON handler as
// one record whose "errors" member is an array of messages; with the text
// handler as one record per message, so that each reads on its own line and
// none carries an escaped newline.
func logErrors(log *slog.Logger, format, msg string, err error) {
	lines := errorLines(err)
	if format == "json" {
		log.Error(msg, "errors", lines)
		return
	}
	for _, l := range lines {
		log.Error("lameduck: " + l)
	}
}

// execute runs root with args and turns its outcome into an exit code and
// the messages on stderr: usage errors (anything cobra refuses before a
// command runs, and usageError from a command) print one line per problem
// and a pointer to --help and return 2; errors already logged return 1;
// other errors print and return 1.
func execute(root *cobra.Command, args []string, stderr io.Writer) int {
	started := false
	root.PersistentPreRun = func(*cobra.Command, []string) { started = true }
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	var logged exitError
	var usage usageError
	var coded codeError
	switch {
	case errors.As(err, &coded):
		return coded.code
	case errors.As(err, &usage) || !started:
		printErrors(stderr, err)
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	case errors.As(err, &logged):
		return exitFailure
	}
	printErrors(stderr, err)
	return exitFailure
}
