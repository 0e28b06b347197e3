//go:build race

package fasthttptest

// raceEnabled: the race detector makes sync.Pool drop a share of what is
// put back, so allocation counts are meaningless under it.
const raceEnabled = true
