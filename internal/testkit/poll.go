package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually looks again: often enough not to add
// latency to a test, rarely enough not to steal a core from what it waits on.
const pollEvery = 5 * time.Millisecond

// Eventually polls cond until it holds, and fails the test when within has
// passed first, saying what it waited for: what is a string, or a func
// evaluated only then (for a description that costs something to build,
// such as goroutine stacks). Polling is for a state no event announces:
// another process (Redis, the built binary, a browser), a count in another
// goroutine. Where an event or a channel exists, wait on it instead.
func Eventually[W string | func() string](t testing.TB, within time.Duration, what W, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			var msg string
			switch w := any(what).(type) {
			case string:
				msg = w
			case func() string:
				msg = w()
			}
			t.Fatalf("not within %v: %s", within, msg)
			return
		}
		time.Sleep(pollEvery)
	}
}
