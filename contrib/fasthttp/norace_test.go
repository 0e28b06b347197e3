//go:build !race

package lameduckfasthttp_test

const raceEnabled = false
