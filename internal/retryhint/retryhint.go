package retryhint

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The error words of a shed answer's body.
const (
	Overloaded  = "OVERLOADED"
	RateLimited = "RATE_LIMITED"
)

// DefaultBase is the base of the jittered retry hints when none is
// configured: handshake.retryAfter's default (and what its 0 means), the
// message tier's and a drain's.
const DefaultBase = time.Second

// ReasonKey names the hint in a close reason (reasonPrefix) and, in
// traces, the attribute that carries it.
const ReasonKey = "retry_after_ms"

const (
	reasonPrefix = ReasonKey + "="
	bodyKey      = `,"retryAfterMs":`
)

// Heads of the two bodies without fields of their own: a body is a head,
// then EndBody.
const (
	HeadOverloaded  = `{"error":"` + Overloaded + `"`
	HeadRateLimited = `{"error":"` + RateLimited + `"`
)

// Jitter is lo plus a uniform random duration in [0, spread) (nothing when
// spread <= 0), so clients given the same hint do not come back in step.
// math/rand/v2's top-level functions use the runtime's per-thread
// generator: no lock, no allocation.
func Jitter(lo, spread time.Duration) time.Duration {
	if spread <= 0 {
		return lo
	}
	return lo + time.Duration(rand.Int64N(int64(spread)))
}

// Millis is d in whole milliseconds, rounded up, at least 1: the N of
// every hint on the wire.
func Millis(d time.Duration) int64 {
	ms := (int64(d) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	return max(ms, 1)
}

// Reason is the close reason of a 1012 or 1013 carrying a hint of ms.
func Reason(ms int64) string {
	return reasonPrefix + strconv.FormatInt(max(ms, 1), 10)
}

// EndBody appends the end of a shed body to b, which holds its head
// (HeadOverloaded, HeadRateLimited, or one of them with more fields):
// `,"retryAfterMs":N}`.
func EndBody(b []byte, ms int64) []byte {
	b = append(b, bodyKey...)
	b = strconv.AppendInt(b, max(ms, 1), 10)
	return append(b, '}')
}

// RetryAfterSeconds is the Retry-After value for a hint of ms: whole
// seconds, rounded up, at least 1.
func RetryAfterSeconds(ms int64) int64 { return max((ms+999)/1000, 1) }

// Shared header values: net/http only reads them, so an answer sets them
// without allocating.
var (
	hdrJSON    = []string{"application/json"}
	hdrNoStore = []string{"no-store"}
	retryAfter [maxRetryAfterSecs + 1][]string
	bodyPool   = sync.Pool{New: func() any { return new([128]byte) }}
)

// maxRetryAfterSecs bounds the precomputed Retry-After values; longer
// hints are formatted per answer.
const maxRetryAfterSecs = 600

func init() {
	for i := range retryAfter {
		retryAfter[i] = []string{strconv.Itoa(i)}
	}
}

// WriteHTTP answers a shed request: Content-Type application/json,
// Cache-Control no-store, Retry-After for ms, the status, then body (a
// head and EndBody, with whatever the caller appends after it).
func WriteHTTP(w http.ResponseWriter, status int, ms int64, body []byte) {
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Cache-Control"] = hdrNoStore
	if secs := RetryAfterSeconds(ms); secs <= maxRetryAfterSecs {
		h["Retry-After"] = retryAfter[secs]
	} else {
		h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client may be gone; nothing to do about it
}

// Answer is WriteHTTP with the body head+EndBody, built in a pooled
// buffer: the answer of a connect storm allocates nothing here.
func Answer(w http.ResponseWriter, status int, head string, ms int64) {
	buf := bodyPool.Get().(*[128]byte)
	WriteHTTP(w, status, ms, EndBody(append(buf[:0], head...), ms))
	bodyPool.Put(buf)
}

// MaxHint caps every hint a client reads: a bogus huge value must not
// park a client for days.
const MaxHint = 10 * time.Minute

// FromReason finds "retry_after_ms=N" in a close reason. It returns 0 when
// absent or malformed; N is capped at MaxHint.
func FromReason(reason string) time.Duration {
	i := strings.Index(reason, reasonPrefix)
	if i < 0 {
		return 0
	}
	s := reason[i+len(reasonPrefix):]
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return fromMillis(s[:n])
}

// FromBody reads retryAfterMs from a JSON object: a shed answer's body,
// or the data of a -32001/-32002 error. 0 when absent or not a positive
// integer; capped at MaxHint.
func FromBody(body []byte) time.Duration {
	var v struct {
		RetryAfterMs json.Number `json:"retryAfterMs"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	return fromMillis(v.RetryAfterMs.String())
}

// FromHeader parses a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 section 10.2.3), relative to now. 0 when absent or malformed;
// capped at MaxHint.
func FromHeader(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		if s > int64(MaxHint/time.Second) {
			return MaxHint
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), MaxHint)
	}
	return 0
}

func fromMillis(digits string) time.Duration {
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || v <= 0 {
		return 0
	}
	if v > MaxHint.Milliseconds() {
		return MaxHint
	}
	return time.Duration(v) * time.Millisecond
}
