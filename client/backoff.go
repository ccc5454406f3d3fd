package client

import "time"

// backoff returns how long to wait before reconnect attempt number attempt
// (0 for the first attempt after a drop), with r uniform in [0, 1).
//
// Without a server hint it is full jitter: uniform in [0, cap] with
// cap = min(maxB, minB·2^attempt), so a crowd that lost its server at the
// same instant spreads out instead of returning in lockstep.
//
// With a hint (Retry-After, a close reason's) the wait is never shorter than
// the hint: hint plus a jitter uniform in [0, min(cap, maxB-hint)]. The
// jitter spreads clients that received the same hint (Retry-After has
// whole-second granularity, so a crowd shed together often gets the same
// value); it is bounded so the result stays within max(hint, maxB).
//
// For fixed r, hint and bounds the result never decreases with attempt.
func backoff(attempt int, minB, maxB, hint time.Duration, r float64) time.Duration {
	if maxB < minB {
		maxB = minB
	}
	cp := minB
	for i := 0; i < attempt && cp < maxB; i++ {
		cp *= 2
	}
	cp = min(cp, maxB)
	if hint <= 0 {
		return time.Duration(r * float64(cp))
	}
	window := min(cp, max(maxB-hint, 0))
	return hint + time.Duration(r*float64(window))
}
