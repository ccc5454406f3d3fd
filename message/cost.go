package message

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/rtserver/rtserver/ratelimit"
)

type costOf uint8

const (
	costBytes costOf = iota
	costFanout
	costParam
)

// costPart is a Cost part: how to price a call, and (for a local scope)
// the per-key token buckets that are charged.
type costPart struct {
	by    rateBy
	of    costOf
	param string
	keyed *ratelimit.Keyed // nil when the scope is cluster
	anon  *ratelimit.Keyed // by user: anonymous calls, keyed by IP
}

// price is what call costs; ok is false when it cannot be known (a
// param:<name> cost whose param is missing, negative or not a number).
func (p *costPart) price(call *Call) (n int64, ok bool) {
	switch p.of {
	case costBytes:
		return max(call.Bytes, 0), true
	case costFanout:
		b, s := max(call.Bytes, 0), max(call.Subscribers, 0)
		if s != 0 && b > math.MaxInt64/s {
			return math.MaxInt64, true // more than any budget: denied
		}
		return b * s, true
	}
	return paramCost(call.Params, p.param)
}

func (p *costPart) allow(call *Call, n int64, now time.Time) ratelimit.Result {
	key, anon := keyOf(p.by, call)
	if anon {
		return p.anon.AllowN(key, n, now)
	}
	return p.keyed.AllowN(key, n, now)
}

// paramCost reads the top-level member name of the JSON object params as a
// non-negative number, rounded up to a whole unit. It allocates nothing
// (for keys up to 32 bytes) and never panics on any input; anything but an
// object holding that member as a plain JSON number (no exponent) is
// ok == false. Members are compared by their raw bytes, so a name written
// with escapes does not match.
//
// A backend may read the same params differently: JavaScript keeps the
// last of a repeated member, encoding/json also matches keys
// case-insensitively, and both resolve escapes. So params that hold the
// name twice, or another key that could mean it to some decoder (equal
// ignoring case, or written with escapes), are priced at math.MaxInt64:
// denied, rather than charged for one value while the backend runs with
// another.
func paramCost(params []byte, name string) (n int64, ok bool) {
	found := false
	i := skipSpace(params, 0)
	if i >= len(params) || params[i] != '{' {
		return 0, false
	}
	i = skipSpace(params, i+1)
	if i < len(params) && params[i] == '}' {
		return 0, false
	}
	for i < len(params) {
		if params[i] != '"' {
			return 0, false
		}
		i0, end := i, skipString(params, i)
		if end < 0 {
			return 0, false
		}
		key := params[i+1 : end-1]
		i = skipSpace(params, end)
		if i >= len(params) || params[i] != ':' {
			return 0, false
		}
		i = skipSpace(params, i+1)
		switch {
		case string(key) == name: // no allocation: the compiler compares in place
			if found {
				return math.MaxInt64, true
			}
			found = true
			if n, ok = parseCost(params, i); !ok {
				return 0, false
			}
		case mayMean(params[i0:end], name):
			return math.MaxInt64, true
		}
		if i = skipValue(params, i); i < 0 {
			return 0, false
		}
		i = skipSpace(params, i)
		if i < len(params) && params[i] == '}' {
			return n, found
		}
		if i >= len(params) || params[i] != ',' {
			return 0, false
		}
		i = skipSpace(params, i+1)
	}
	return 0, false
}

// mayMean reports whether a key (its JSON string literal, quotes
// included) that is not name byte for byte could still mean name to some
// JSON decoder: once escapes are resolved (only then does it allocate),
// equal ignoring case (encoding/json's matching, Unicode folds included).
func mayMean(lit []byte, name string) bool {
	key := lit[1 : len(lit)-1]
	if bytes.IndexByte(key, '\\') < 0 {
		return strings.EqualFold(string(key), name)
	}
	var k string
	return json.Unmarshal(lit, &k) == nil && strings.EqualFold(k, name)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] ('"'),
// or -1 when it does not end.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at b[i], or -1.
// It checks only enough structure to find the value's end: brackets nest
// and strings end.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			if i = skipString(b, i); i < 0 {
				return -1
			}
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object: a scalar ended here
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	if depth == 0 {
		return i
	}
	return -1
}

// parseCost parses a non-negative JSON number at b[i] (digits, an optional
// fraction; no sign, no exponent), rounding a fraction up, and checks that
// the value ends there.
func parseCost(b []byte, i int) (int64, bool) {
	start := i
	var n int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		d := int64(b[i] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
		i++
	}
	if i == start {
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		frac := false
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			frac = frac || b[i] != '0'
			i++
		}
		if frac {
			if n == math.MaxInt64 {
				return 0, false
			}
			n++
		}
	}
	i = skipSpace(b, i)
	if i >= len(b) || (b[i] != ',' && b[i] != '}') {
		return 0, false
	}
	return n, true
}
