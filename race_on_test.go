//go:build race

package lameduck_test

const raceEnabled = true
