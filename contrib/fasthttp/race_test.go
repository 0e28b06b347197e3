//go:build race

package ldfasthttp_test

// raceEnabled: the race detector makes sync.Pool drop a share of what is
// put back, so allocation counts are meaningless under it.
const raceEnabled = true
