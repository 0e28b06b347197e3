//go:build !race

package lameduckfiberv3_test

const raceEnabled = false
