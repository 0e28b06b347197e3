//go:build !race

package ldfiberv3_test

const raceEnabled = false
