//go:build !race

package ldfiber_test

const raceEnabled = false
