// Package testkit is the test helpers every package shares: a
// concurrency-safe log buffer (LogBuffer), a poll-until helper
// (Eventually), a hand-moved clock (Clock), a loopback TCP pair
// (TCPPair), and the check for the external
// programs integration tests run (Program: redis-server, chromium,
// promtool).
//
// It must never be imported by non-test code, and never paper over a
// missing program silently: a test that needs one either runs or says, in
// its skip message, which program is missing and how to install it; with
// RTSERVER_REQUIRE_INTEGRATION=1 (scripts/test.sh sets it, so CI does) a
// missing program fails the test instead.
package testkit
