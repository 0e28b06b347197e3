//go:build !race

package lameduckfiber_test

const raceEnabled = false
