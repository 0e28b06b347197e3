package testsupport

import (
	"testing"
	"time"
)

// CPUMeter measures the CPU time (user and system) the process uses, on
// every thread, from StartCPU: a benchmark whose work another goroutine
// does pays for it even when another core runs it. Unlike ns/op, it also
// leaves out the time spent waiting for a CPU.
type CPUMeter struct{ start time.Duration }

// StartCPU starts a CPUMeter.
func StartCPU() CPUMeter { return CPUMeter{processCPU()} }

// Report reports the CPU time used since StartCPU, divided by n operations,
// as b's "cpu-ns/op" metric. It reports nothing where the platform's CPU
// time is not measured (outside Unix).
func (m CPUMeter) Report(b *testing.B, n int) {
	if cpu := processCPU() - m.start; cpu > 0 && n > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/op")
	}
}
