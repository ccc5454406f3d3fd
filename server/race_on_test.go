//go:build race

package server

// raceEnabled: the race detector slows every test several times; long
// runs are shortened under it.
const raceEnabled = true
