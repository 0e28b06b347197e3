//go:build !race

package ldfasthttp_test

const raceEnabled = false
