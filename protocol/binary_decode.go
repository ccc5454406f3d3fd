package protocol

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
)

// BinaryToJSON appends to dst the JSON text of one binary-protocol frame:
// the MessagePack value src holds, whole. A map, and each map of a
// top-level array (the request objects of a frame), gets the member
// "jsonrpc":"2.0" first unless it has one; bin becomes the JSON form of
// bytes (AppendBytesJSON). src is untrusted: anything that is not one
// MessagePack value of nil, booleans, integers, finite floats, UTF-8
// strs, bins, arrays and maps with str keys (ext types included) answers
// -32700, and nesting deeper than maxDepth (0 or less: DefaultMaxDepth)
// -32600, the errors of a JSON frame. FuzzBinaryToJSON proves it panics
// on nothing and writes only valid JSON.
func BinaryToJSON(dst, src []byte, maxDepth int) ([]byte, *Error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	d := mpDecoder{src: src, max: maxDepth}
	out, ok := d.value(dst, 1, envelopeTop)
	switch {
	case d.deep:
		return dst, tooDeep(maxDepth)
	case !ok || d.pos != len(src):
		return dst, NewError(CodeParseError, "", nil)
	}
	return out, nil
}

// Where a value stands, for the "jsonrpc" member a request object gets.
const (
	envelopeNone  = iota
	envelopeTop   // the frame's value: a request, or a batch
	envelopeBatch // an element of a batch
)

type mpDecoder struct {
	src  []byte
	pos  int
	max  int
	deep bool
}

// take returns the next n bytes, or false when src has fewer.
func (d *mpDecoder) take(n int) ([]byte, bool) {
	if n < 0 || n > len(d.src)-d.pos {
		return nil, false
	}
	b := d.src[d.pos : d.pos+n]
	d.pos += n
	return b, true
}

// length reads a big-endian length of size bytes (1, 2 or 4).
func (d *mpDecoder) length(size int) (int, bool) {
	b, ok := d.take(size)
	if !ok {
		return 0, false
	}
	switch size {
	case 1:
		return int(b[0]), true
	case 2:
		return int(binary.BigEndian.Uint16(b)), true
	}
	return int(binary.BigEndian.Uint32(b)), true
}

// value appends the JSON of the value at d.pos, depth levels deep.
func (d *mpDecoder) value(b []byte, depth, env int) ([]byte, bool) {
	if d.pos >= len(d.src) {
		return b, false
	}
	c := d.src[d.pos]
	d.pos++
	switch {
	case c <= 0x7f:
		return strconv.AppendUint(b, uint64(c), 10), true
	case c >= 0xe0:
		return strconv.AppendInt(b, int64(int8(c)), 10), true
	case c&0xf0 == 0x80:
		return d.mapOf(b, int(c&0x0f), depth, env)
	case c&0xf0 == 0x90:
		return d.array(b, int(c&0x0f), depth, env)
	case c&0xe0 == 0xa0:
		return d.str(b, int(c&0x1f))
	}
	switch c {
	case mpNil:
		return append(b, "null"...), true
	case mpFalse:
		return append(b, "false"...), true
	case mpTrue:
		return append(b, "true"...), true
	case mpBin8, mpBin16, mpBin32:
		n, ok := d.length(1 << (c - mpBin8))
		if !ok {
			return b, false
		}
		p, ok := d.take(n)
		if !ok {
			return b, false
		}
		return AppendBytesJSON(b, p), true
	case mpFloat32:
		p, ok := d.take(4)
		if !ok {
			return b, false
		}
		return appendJSONFloat(b, float64(math.Float32frombits(binary.BigEndian.Uint32(p))), 32)
	case mpFloat64:
		p, ok := d.take(8)
		if !ok {
			return b, false
		}
		return appendJSONFloat(b, math.Float64frombits(binary.BigEndian.Uint64(p)), 64)
	case mpUint8, mpUint16, mpUint32, mpUint64:
		p, ok := d.take(1 << (c - mpUint8))
		if !ok {
			return b, false
		}
		return strconv.AppendUint(b, beUint(p), 10), true
	case mpInt8, mpInt16, mpInt32, mpInt64:
		p, ok := d.take(1 << (c - mpInt8))
		if !ok {
			return b, false
		}
		return strconv.AppendInt(b, beInt(p), 10), true
	case mpStr8, mpStr16, mpStr32:
		n, ok := d.length(1 << (c - mpStr8))
		if !ok {
			return b, false
		}
		return d.str(b, n)
	case mpArray16, mpArray32:
		n, ok := d.length(2 << (c - mpArray16))
		if !ok {
			return b, false
		}
		return d.array(b, n, depth, env)
	case mpMap16, mpMap32:
		n, ok := d.length(2 << (c - mpMap16))
		if !ok {
			return b, false
		}
		return d.mapOf(b, n, depth, env)
	}
	return b, false // 0xc1 (never used), ext and fixext
}

func beUint(p []byte) uint64 {
	var u uint64
	for _, c := range p {
		u = u<<8 | uint64(c)
	}
	return u
}

func beInt(p []byte) int64 {
	u := beUint(p)
	shift := 64 - 8*len(p)
	return int64(u<<shift) >> shift
}

func (d *mpDecoder) str(b []byte, n int) ([]byte, bool) {
	s, ok := d.take(n)
	if !ok || !validString(s) {
		return b, false
	}
	return appendJSONString(b, s), true
}

// enter checks the depth of a container with n elements, each at least
// one byte of what is left.
func (d *mpDecoder) enter(n, depth int) bool {
	if depth > d.max {
		d.deep = true
		return false
	}
	return n <= len(d.src)-d.pos
}

func (d *mpDecoder) array(b []byte, n, depth, env int) ([]byte, bool) {
	if !d.enter(n, depth) {
		return b, false
	}
	inner := envelopeNone
	if env == envelopeTop {
		inner = envelopeBatch
	}
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = d.value(b, depth+1, inner); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// rpcMember is the member a request object of the binary protocol may
// leave out.
const rpcMember = `"jsonrpc":"2.0"`

func (d *mpDecoder) mapOf(b []byte, n, depth, env int) ([]byte, bool) {
	if !d.enter(2*n, depth) {
		return b, false
	}
	b = append(b, '{')
	open := len(b)
	hasRPC := false
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		key, ok := d.key()
		if !ok {
			return b, false
		}
		hasRPC = hasRPC || string(key) == "jsonrpc"
		b = appendJSONString(b, key)
		b = append(b, ':')
		if b, ok = d.value(b, depth+1, envelopeNone); !ok {
			return b, false
		}
	}
	if env != envelopeNone && !hasRPC {
		// Insert the member at the front: the server reads a request
		// whichever order its members come in, a client reading an
		// echo of it expects it first.
		ins := rpcMember
		if n > 0 {
			ins += ","
		}
		b = append(b, ins...)
		copy(b[open+len(ins):], b[open:len(b)-len(ins)])
		copy(b[open:], ins)
	}
	return append(b, '}'), true
}

// key reads a map key: a str.
func (d *mpDecoder) key() ([]byte, bool) {
	if d.pos >= len(d.src) {
		return nil, false
	}
	c := d.src[d.pos]
	d.pos++
	n := 0
	switch {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == mpStr8 || c == mpStr16 || c == mpStr32:
		var ok bool
		if n, ok = d.length(1 << (c - mpStr8)); !ok {
			return nil, false
		}
	default:
		return nil, false
	}
	s, ok := d.take(n)
	if !ok || !validString(s) {
		return nil, false
	}
	return s, true
}

// appendBase64Bin appends the bytes of base64 text s as a bin, or
// reports false when s is not standard padded base64.
func appendBase64Bin(b, s []byte) ([]byte, bool) {
	n := base64.StdEncoding.DecodedLen(len(s))
	if len(s) >= 2 && s[len(s)-1] == '=' {
		n--
		if s[len(s)-2] == '=' {
			n--
		}
	}
	start := len(b)
	b = appendMsgpackHead(b, n, 0, -1, mpBin8, mpBin16, mpBin32)
	head := len(b) - start
	out, err := strictBase64.AppendDecode(b, s)
	if err != nil || len(out)-start-head != n {
		return b[:start], false
	}
	return out, true
}
