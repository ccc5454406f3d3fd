package jsonexact

import "encoding/binary"

// Check is json.Valid and DeeperThan in one pass over the bytes: every
// frame a client sends is checked once, and encoding/json's validator (a
// state machine called through a function value per byte) was a quarter
// of a publishing connection's CPU. FuzzCheck holds it to json.Valid's
// answer on every input.

// maxNesting is encoding/json's own nesting limit: json.Valid refuses
// anything deeper, whatever the caller's limit.
const maxNesting = 10000

// Check reports whether data is one JSON value, optionally surrounded by
// whitespace, exactly as json.Valid decides (invalid UTF-8 inside strings
// included: callers check UTF-8 themselves), and whether it nests arrays
// and objects more than maxDepth levels deep. deep is meaningful only when
// valid. It allocates nothing unless data nests more than 64 levels.
func Check(data []byte, maxDepth int) (valid, deep bool) {
	var inline [64]byte
	stack := inline[:0] // '{' or '[' per open container
	i := skipSpace(data, 0)
	for {
		// A value starts at i.
		if i >= len(data) {
			return false, false
		}
		switch c := data[i]; c {
		case '{', '[':
			if len(stack) == maxNesting {
				return false, false
			}
			stack = append(stack, c)
			if len(stack) > maxDepth {
				deep = true
			}
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = memberKey(data, i); i < 0 {
					return false, false
				}
			}
			continue
		case '"':
			if i = scanString(data, i); i < 0 {
				return false, false
			}
		case 't':
			if i = literal(data, i, "true"); i < 0 {
				return false, false
			}
		case 'f':
			if i = literal(data, i, "false"); i < 0 {
				return false, false
			}
		case 'n':
			if i = literal(data, i, "null"); i < 0 {
				return false, false
			}
		default:
			if i = scanNumber(data, i); i < 0 {
				return false, false
			}
		}
		// A value ended at i: close containers until one takes another
		// element, or the text ends.
		for {
			i = skipSpace(data, i)
			if len(stack) == 0 {
				return i == len(data), deep
			}
			if i >= len(data) {
				return false, false
			}
			open := stack[len(stack)-1]
			if data[i] == open+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return false, false
			}
			i = skipSpace(data, i+1)
			if open == '{' {
				if i = memberKey(data, i); i < 0 {
					return false, false
				}
			}
			break
		}
	}
}

// memberKey scans `"key" :` and the space after it, from i, and returns
// where the member's value starts, or -1.
func memberKey(d []byte, i int) int {
	if i >= len(d) || d[i] != '"' {
		return -1
	}
	if i = scanString(d, i); i < 0 {
		return -1
	}
	i = skipSpace(d, i)
	if i >= len(d) || d[i] != ':' {
		return -1
	}
	return skipSpace(d, i+1)
}

// stringPlain marks the bytes a JSON string holds as they are: not the
// closing quote, not the escape, not a control character.
var stringPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString returns the index after the valid string literal starting at
// d[i] == '"', or -1.
func scanString(d []byte, i int) int {
	i++
	for {
		for i+8 <= len(d) && plain8(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) && stringPlain[d[i]] {
			i++
		}
		if i >= len(d) {
			return -1
		}
		switch d[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(d) {
				return -1
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

// plain8 reports whether none of the 8 bytes in v is a quote, a
// backslash or a control character (the classic "has a zero byte" and
// "has a byte less than n" word tricks: exact about whether one exists).
func plain8(v uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(x uint64) uint64 { return (x - ones) & ^x & highs }
	return hasZero(v^(ones*'"'))|hasZero(v^(ones*'\\'))|((v-ones*0x20) & ^v & highs) == 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal returns the index after word at d[i], or -1.
func literal(d []byte, i int, word string) int {
	if len(d)-i < len(word) || string(d[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// scanNumber returns the index after the valid number starting at d[i]
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), or -1.
func scanNumber(d []byte, i int) int {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i+1)
	default:
		return -1
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}
