//go:build !race

package fasthttptest

const raceEnabled = false
