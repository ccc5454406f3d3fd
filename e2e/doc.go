// Package e2e holds black-box tests of the built rtserver binary: each test
// starts real rtserver processes (and real redis-server processes) on free
// loopback ports and drives them with real WebSocket clients over TCP. It
// imports no internal package to cheat: only the public client, the wire
// protocol's codes and the test helpers that start processes.
package e2e
