package lameduck_test

import (
	"runtime"
	"testing"
)

// exactAllocs returns how many heap allocations runs calls of f made in
// all: an exact total, where testing.AllocsPerRun returns an average that
// rounds a few allocations in a thousand runs down to 0. Like AllocsPerRun it
// warms f once and counts with GOMAXPROCS at 1.
//
// Under the race detector sync.Pool drops a share of what is put back on
// purpose, so a pooled hot path allocates now and then and no exact count
// holds: callers skip there, and .ci/run runs the allocation tests once more
// without -race.
func exactAllocs(t *testing.T, runs int, f func()) uint64 {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items on purpose; .ci/run counts allocations without -race")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}
