package lameduck

import (
	"os"
	"syscall"
)

func defaultSignals() []os.Signal { return []os.Signal{syscall.SIGTERM, os.Interrupt} }

// exitCode returns 128 + the signal's number, the shell's convention for a
// process ended by a signal, or 1 for a signal without a number.
func exitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
