package protocol

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// JSONToBinary appends to dst the MessagePack form of the JSON text src
// (one value, valid JSON): what a binary-protocol peer gets for it.
// Objects become maps, arrays arrays, strings strs; integers that fit 64
// bits become integers and other numbers float64s; the JSON form of bytes
// ({"$bin":"<base64>"}) becomes a bin. A request or notification object
// (the value, or an element of a top-level array) loses its "jsonrpc"
// member when it is "2.0", which the binary protocol leaves out. It reports false when src
// is not valid JSON.
func JSONToBinary(dst, src []byte) ([]byte, bool) {
	e := jsEncoder{src: src}
	e.space()
	out, ok := e.value(dst, envelopeTop)
	if !ok {
		return dst, false
	}
	e.space()
	return out, e.pos == len(src)
}

// AppendBinaryMessage appends the MessagePack form of a "message"
// notification: what AppendMessage (offset < 0) or AppendMessageAt
// writes, for a binary client. data is valid JSON.
func AppendBinaryMessage(b []byte, topic string, offset int64, data []byte) ([]byte, bool) {
	b = append(b, 0x82) // method, params
	b = AppendMsgpackStr(b, "method")
	b = AppendMsgpackStr(b, NotifyMessage)
	b = AppendMsgpackStr(b, "params")
	if offset < 0 {
		b = append(b, 0x82)
	} else {
		b = append(b, 0x83)
	}
	b = AppendMsgpackStr(b, "topic")
	b = AppendMsgpackStr(b, topic)
	if offset >= 0 {
		b = AppendMsgpackStr(b, "offset")
		b = AppendMsgpackUint(b, uint64(offset))
	}
	b = AppendMsgpackStr(b, "data")
	if s, ok := bytesBase64(data); ok {
		// The common binary case, without the general walk.
		if out, ok := appendBase64Bin(b, s); ok {
			return out, true
		}
	}
	return JSONToBinary(b, data)
}

// rpcVersionStr is the MessagePack str "2.0".
const rpcVersionStr = "\xa32.0"

type jsEncoder struct {
	src   []byte
	pos   int
	depth int
}

// maxEncodeDepth bounds the nesting JSONToBinary follows: what clients
// send is bounded far lower (limits.maxJSONDepth), but an application
// publishing through the Go API is not.
const maxEncodeDepth = 10000

func (e *jsEncoder) space() {
	for e.pos < len(e.src) {
		switch e.src[e.pos] {
		case ' ', '\t', '\r', '\n':
			e.pos++
		default:
			return
		}
	}
}

func (e *jsEncoder) value(b []byte, env int) ([]byte, bool) {
	if e.pos >= len(e.src) {
		return b, false
	}
	switch c := e.src[e.pos]; {
	case c == '{':
		return e.object(b, env)
	case c == '[':
		return e.array(b, env)
	case c == '"':
		s, ok := e.str()
		if !ok {
			return b, false
		}
		return AppendMsgpackStr(b, s), true
	case c == 't':
		return e.word(b, "true", mpTrue)
	case c == 'f':
		return e.word(b, "false", mpFalse)
	case c == 'n':
		return e.word(b, "null", mpNil)
	case c == '-' || '0' <= c && c <= '9':
		return e.number(b)
	}
	return b, false
}

func (e *jsEncoder) word(b []byte, w string, code byte) ([]byte, bool) {
	if len(e.src)-e.pos < len(w) || string(e.src[e.pos:e.pos+len(w)]) != w {
		return b, false
	}
	e.pos += len(w)
	return append(b, code), true
}

func (e *jsEncoder) number(b []byte) ([]byte, bool) {
	start := e.pos
	integer := true
	for e.pos < len(e.src) {
		c := e.src[e.pos]
		if c == '.' || c == 'e' || c == 'E' {
			integer = false
		} else if c != '-' && c != '+' && (c < '0' || c > '9') {
			break
		}
		e.pos++
	}
	lit := string(e.src[start:e.pos])
	if integer {
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return appendMsgpackInt(b, i), true
		}
		if u, err := strconv.ParseUint(lit, 10, 64); err == nil {
			return AppendMsgpackUint(b, u), true
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !isRangeErr(err) {
		return b, false
	}
	if math.IsInf(f, 0) {
		// Past float64's range (JSON allows 1e999): the largest float64
		// of its sign, which every MessagePack reader can take.
		f = math.Copysign(math.MaxFloat64, f)
	}
	b = append(b, mpFloat64)
	bits := math.Float64bits(f)
	return append(b, byte(bits>>56), byte(bits>>48), byte(bits>>40), byte(bits>>32), byte(bits>>24), byte(bits>>16), byte(bits>>8), byte(bits)), true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// str reads a string literal and returns its text.
func (e *jsEncoder) str() (string, bool) {
	start := e.pos
	e.pos++
	plain := true
	for e.pos < len(e.src) {
		switch c := e.src[e.pos]; c {
		case '"':
			e.pos++
			lit := e.src[start:e.pos]
			if plain && utf8.Valid(lit) {
				return string(lit[1 : len(lit)-1]), true
			}
			var s string
			if json.Unmarshal(lit, &s) != nil {
				return "", false
			}
			return s, true
		case '\\':
			plain = false
			e.pos += 2
			continue
		}
		e.pos++
	}
	return "", false
}

// container walks the elements of an array or the pairs of an object,
// appending each with elem (which says how many it wrote: 0 or 1), after
// room for the longest head; then writes the real head and closes the
// gap.
func (e *jsEncoder) container(b []byte, close byte, elem func([]byte) ([]byte, int, bool), appendHead func([]byte, int) []byte) ([]byte, bool) {
	e.pos++ // the opening bracket
	if e.depth++; e.depth > maxEncodeDepth {
		return b, false
	}
	defer func() { e.depth-- }()
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0)
	n := 0
	e.space()
	if e.pos < len(e.src) && e.src[e.pos] == close {
		e.pos++
	} else {
		for {
			e.space()
			var k int
			var ok bool
			if b, k, ok = elem(b); !ok {
				return b, false
			}
			n += k
			e.space()
			if e.pos >= len(e.src) {
				return b, false
			}
			c := e.src[e.pos]
			e.pos++
			if c == close {
				break
			}
			if c != ',' {
				return b, false
			}
		}
	}
	h := msgpackHeadLen(n)
	copy(b[start+h:], b[start+5:])
	b = b[:len(b)-(5-h)]
	appendHead(b[start:start], n) // in place: b[start:start] has room for h bytes
	return b, true
}

func (e *jsEncoder) array(b []byte, env int) ([]byte, bool) {
	inner := envelopeNone
	if env == envelopeTop {
		inner = envelopeBatch
	}
	return e.container(b, ']', func(b []byte) ([]byte, int, bool) {
		b, ok := e.value(b, inner)
		return b, 1, ok
	}, appendMsgpackArrayHead)
}

func (e *jsEncoder) object(b []byte, env int) ([]byte, bool) {
	if out, ok := e.bytesForm(b); ok {
		return out, true
	}
	return e.container(b, '}', func(b []byte) ([]byte, int, bool) {
		if e.pos >= len(e.src) || e.src[e.pos] != '"' {
			return b, 0, false
		}
		k, ok := e.str()
		if !ok {
			return b, 0, false
		}
		e.space()
		if e.pos >= len(e.src) || e.src[e.pos] != ':' {
			return b, 0, false
		}
		e.pos++
		e.space()
		if env != envelopeNone && k == "jsonrpc" {
			// Left out when it says "2.0": the binary protocol's
			// requests and answers are all of JSON-RPC 2.0.
			var v [8]byte
			val, ok := e.value(v[:0], envelopeNone)
			if ok && string(val) == rpcVersionStr {
				return b, 0, true
			}
			b = append(AppendMsgpackStr(b, k), val...)
			return b, 1, ok
		}
		b, ok = e.value(AppendMsgpackStr(b, k), envelopeNone)
		return b, 1, ok
	}, AppendMsgpackMapHead)
}

// bytesForm appends the bin of an object that is exactly the JSON form of
// bytes, {"$bin":"<base64>"} (whitespace allowed), and reports whether
// it was: otherwise nothing is read.
func (e *jsEncoder) bytesForm(b []byte) ([]byte, bool) {
	save := e.pos
	e.pos++
	e.space()
	if k, ok := e.peekStr(); !ok || string(k) != BytesMember {
		e.pos = save
		return b, false
	}
	e.space()
	if e.pos >= len(e.src) || e.src[e.pos] != ':' {
		e.pos = save
		return b, false
	}
	e.pos++
	e.space()
	start := e.pos
	if _, ok := e.peekStr(); !ok {
		e.pos = save
		return b, false
	}
	lit := e.src[start:e.pos]
	e.space()
	if e.pos >= len(e.src) || e.src[e.pos] != '}' {
		e.pos = save
		return b, false
	}
	out, ok := appendBase64Bin(b, lit[1:len(lit)-1])
	if !ok {
		e.pos = save
		return b, false
	}
	e.pos++
	return out, true
}

// peekStr reads a string literal without escapes and returns its text,
// or reports false.
func (e *jsEncoder) peekStr() ([]byte, bool) {
	if e.pos >= len(e.src) || e.src[e.pos] != '"' {
		return nil, false
	}
	for i := e.pos + 1; i < len(e.src); i++ {
		switch e.src[i] {
		case '\\':
			return nil, false
		case '"':
			s := e.src[e.pos+1 : i]
			e.pos = i + 1
			return s, true
		}
	}
	return nil, false
}
