// Package faultproxy is a TCP proxy for tests that puts the faults of a
// bad day between a client and a server: a black hole (connections stay
// open, nothing gets through either way), a delay on every chunk from the
// client, and a reset of every connection. It stands between rtserver and
// its Redis in the bad-day tests (e2e/badday_matrix_test.go). Test-only:
// a chunk held by Delay sleeps in the pump, which is the fault itself.
package faultproxy
