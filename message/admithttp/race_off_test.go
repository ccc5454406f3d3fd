//go:build !race

package admithttp_test

const raceEnabled = false
