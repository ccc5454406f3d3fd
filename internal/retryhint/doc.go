// Package retryhint owns the retry hints of the wire (docs/protocol.md and
// docs/handshake.md): how a shed client is told when to come back, and how
// the Go client reads it. One place writes and parses them:
//
//   - the jitter every hint gets, so a shed crowd does not return in step;
//   - the HTTP answer to a shed request: 503 or 429, Retry-After in whole
//     seconds (at least 1), and the JSON body {"error":WORD,...,"retryAfterMs":N};
//   - the close reason of 1012 and 1013, "retry_after_ms=N";
//   - parsing each of them back, capped so a bogus hint cannot park a
//     client for days.
//
// It must never hold policy: how long a hint is (a base, the shedding
// rate, a limiter's own wait) is decided by the caller. N is always a
// positive integer: every writer rounds up to whole milliseconds, at
// least 1. Writing an answer allocates nothing beyond what net/http does.
package retryhint
