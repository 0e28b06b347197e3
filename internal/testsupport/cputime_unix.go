//go:build unix

package testsupport

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used,
// on every thread: a probe that hands work to another goroutine pays for it
// here even when the other core runs it.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
