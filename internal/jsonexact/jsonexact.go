// Package jsonexact is the one rule by which rtserver reads the JSON it
// is sent: client frames (package protocol), server API bodies (package
// serverapi), JWT claims (package handshake) and the messages it reads
// back from Redis (package history).
//
// Member names match exactly: case-sensitive, after escapes are resolved
// (unlike encoding/json, which matches them case-insensitively and keeps
// the last of a repeated one); a caller learns of a repeated member it
// reads and refuses it. So no input can mean one thing to rtserver and
// another to a backend or a second reader. Objects are walked member by
// member once Check (json.Valid's answer and the nesting depth in one
// pass) or json.Valid has vouched for the bytes, slicing values out of
// the input instead of copying them: results alias the input. Nesting is
// bounded by Check or DeeperThan, which callers apply with
// limits.maxJSONDepth.
//
// Must never: allocate on the common path (keys without escapes), accept
// anything json.Valid refuses, or walk bytes that have not been checked.
package jsonexact

import (
	"bytes"
	"encoding/json"
)

// Members reads the members named in names out of the JSON object data
// (valid JSON) into vals, index for index, with exact keys. It returns the
// first name that appears twice (reading stops there), whether any other
// member is present, and false when data is not an object. It allocates
// nothing unless a key has escapes.
func Members(data []byte, names []string, vals [][]byte) (dup string, other, ok bool) {
	ok = WalkObject(data, func(key, value []byte) bool {
		for i, n := range names {
			if string(key) == n {
				if vals[i] != nil {
					dup = n
					return false
				}
				vals[i] = value
				return true
			}
		}
		other = true
		return true
	})
	return dup, other, ok || dup != ""
}

// WalkObject calls f for each member of the JSON object in data, which
// must be valid JSON (callers run Check or json.Valid first), with the key
// unescaped (a key with escapes costs one allocation). It reports false
// when data is not an object or f says stop.
func WalkObject(data []byte, f func(key, value []byte) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) && data[i] == '"' {
		end := skipString(data, i)
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(data[i:end], &k) != nil {
				return false
			}
			key = []byte(k)
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i)
		if vend <= i || !f(key, data[i:vend]) {
			return false
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value starting at i.
func skipValue(d []byte, i int) int {
	if i >= len(d) {
		return i
	}
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				i = skipString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(d) {
			switch d[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index after the string starting at d[i] == '"'
// (len(d) when it does not end). The bytes are valid JSON, so the string
// ends at the first quote not escaped: one preceded by an even number of
// backslashes. Searching for quotes (a vector instruction) instead of
// stepping byte by byte is what makes walking a valid frame cheap.
func skipString(d []byte, i int) int {
	i++
	// Keys and short values end within a few bytes: stepping is cheaper
	// there than a call.
	for end := min(i+16, len(d)); i < end; i++ {
		switch d[i] {
		case '"':
			return i + 1
		case '\\':
			if i++; i == end {
				return skipString(d, i) // the escaped byte ends the window
			}
		}
	}
	for {
		q := bytes.IndexByte(d[i:], '"')
		if q < 0 {
			return len(d)
		}
		q += i
		n := 0
		for q-n-1 >= i && d[q-n-1] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// WalkArray calls f with each element of the JSON array in data, which
// must be valid JSON, until f says stop. It allocates nothing.
func WalkArray(data []byte, f func(elem []byte) bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return
	}
	i = skipSpace(data, i+1)
	for i < len(data) && data[i] != ']' {
		end := skipValue(data, i)
		if end <= i || !f(data[i:end]) {
			return
		}
		i = skipSpace(data, end)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
}

// DeeperThan reports whether the JSON value in data (valid JSON) nests
// arrays and objects more than max levels deep. Frames with fewer
// brackets than that are answered without a walk.
func DeeperThan(data []byte, max int) bool {
	if bytes.Count(data, []byte{'{'})+bytes.Count(data, []byte{'['}) <= max {
		return false
	}
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = skipString(data, i) - 1
		case '{', '[':
			depth++
			if depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}
