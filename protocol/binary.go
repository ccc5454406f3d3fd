package protocol

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"
)

// The binary protocol (docs/protocol.md, "The rt.msgpack subprotocol"):
// the same JSON-RPC messages, each frame one MessagePack value, in which
// message data may be raw bytes (MessagePack bin). The server runs a
// binary frame by transcoding it to the JSON request it stands for
// (BinaryToJSON), and sends a binary client the MessagePack form of the
// JSON it would have sent (JSONToBinary). Bytes have one JSON form,
// {"$bin":"<base64>"} (BytesMember), which is how they travel inside the
// server (bus, history) and how JSON clients see them.

// BinarySubprotocol is the WebSocket subprotocol under which every frame,
// both ways, is one binary frame holding one MessagePack value.
const BinarySubprotocol = "rt.msgpack"

// BytesMember is the only member of the JSON form of bytes:
// {"$bin":"<standard base64, padded>"}.
const BytesMember = "$bin"

// bytesPrefix and bytesSuffix surround the base64 of the JSON form.
const (
	bytesPrefix = `{"` + BytesMember + `":"`
	bytesSuffix = `"}`
)

// AppendBytesJSON appends the JSON form of b: {"$bin":"<base64>"}.
func AppendBytesJSON(dst, b []byte) []byte {
	dst = append(dst, bytesPrefix...)
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, bytesSuffix...)
}

// BytesOf reports whether data (compact JSON, as the server delivers it)
// is the JSON form of bytes, and returns them.
func BytesOf(data []byte) ([]byte, bool) {
	s, ok := bytesBase64(data)
	if !ok {
		return nil, false
	}
	b, err := strictBase64.AppendDecode(nil, s)
	if err != nil {
		return nil, false
	}
	return b, true
}

// bytesBase64 is the base64 text of data when data has the JSON form of
// bytes (compact), unchecked.
func bytesBase64(data []byte) ([]byte, bool) {
	n := len(data)
	if n < len(bytesPrefix)+len(bytesSuffix) || string(data[:len(bytesPrefix)]) != bytesPrefix || string(data[n-len(bytesSuffix):]) != bytesSuffix {
		return nil, false
	}
	s := data[len(bytesPrefix) : n-len(bytesSuffix)]
	for _, c := range s {
		if !isBase64(c) {
			return nil, false
		}
	}
	return s, true
}

// strictBase64 reads the JSON form's base64: standard, padded, and
// canonical (unused bits zero), so one text stands for one byte string
// and bytes that travel as JSON and back come back as the same text.
var strictBase64 = base64.StdEncoding.Strict()

func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// MessagePack format bytes (github.com/msgpack/msgpack, spec.md).
const (
	mpNil     = 0xc0
	mpFalse   = 0xc2
	mpTrue    = 0xc3
	mpBin8    = 0xc4
	mpBin16   = 0xc5
	mpBin32   = 0xc6
	mpFloat32 = 0xca
	mpFloat64 = 0xcb
	mpUint8   = 0xcc
	mpUint16  = 0xcd
	mpUint32  = 0xce
	mpUint64  = 0xcf
	mpInt8    = 0xd0
	mpInt16   = 0xd1
	mpInt32   = 0xd2
	mpInt64   = 0xd3
	mpStr8    = 0xd9
	mpStr16   = 0xda
	mpStr32   = 0xdb
	mpArray16 = 0xdc
	mpArray32 = 0xdd
	mpMap16   = 0xde
	mpMap32   = 0xdf
)

// AppendMsgpackStr appends s as a MessagePack str.
func AppendMsgpackStr(b []byte, s string) []byte {
	b = appendMsgpackHead(b, len(s), 0xa0, 31, mpStr8, mpStr16, mpStr32)
	return append(b, s...)
}

// AppendMsgpackBin appends p as a MessagePack bin.
func AppendMsgpackBin(b, p []byte) []byte {
	b = appendMsgpackHead(b, len(p), 0, -1, mpBin8, mpBin16, mpBin32)
	return append(b, p...)
}

// AppendMsgpackUint appends u as a MessagePack unsigned integer.
func AppendMsgpackUint(b []byte, u uint64) []byte {
	switch {
	case u <= 0x7f:
		return append(b, byte(u))
	case u <= math.MaxUint8:
		return append(b, mpUint8, byte(u))
	case u <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(u))
	case u <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(u))
	}
	return binary.BigEndian.AppendUint64(append(b, mpUint64), u)
}

// appendMsgpackInt appends i as a MessagePack integer.
func appendMsgpackInt(b []byte, i int64) []byte {
	switch {
	case i >= 0:
		return AppendMsgpackUint(b, uint64(i))
	case i >= -32:
		return append(b, byte(i))
	case i >= math.MinInt8:
		return append(b, mpInt8, byte(i))
	case i >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(i))
	case i >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(i))
	}
	return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(i))
}

// AppendMsgpackMapHead appends the head of a map of n pairs.
func AppendMsgpackMapHead(b []byte, n int) []byte {
	return appendMsgpackHead(b, n, 0x80, 15, 0, mpMap16, mpMap32)
}

// appendMsgpackArrayHead appends the head of an array of n elements.
func appendMsgpackArrayHead(b []byte, n int) []byte {
	return appendMsgpackHead(b, n, 0x90, 15, 0, mpArray16, mpArray32)
}

// appendMsgpackHead appends the head of a str, bin, array or map of n:
// the fix form up to fixMax (none when fixMax < 0), then the 8-bit form
// (none when f8 is 0), the 16- and the 32-bit form.
func appendMsgpackHead(b []byte, n int, fix byte, fixMax int, f8, f16, f32 byte) []byte {
	switch {
	case n <= fixMax:
		return append(b, fix|byte(n))
	case f8 != 0 && n <= math.MaxUint8:
		return append(b, f8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, f16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, f32), uint32(n))
}

// msgpackHeadLen is the length of the head appendMsgpackHead writes for
// an array or map of n.
func msgpackHeadLen(n int) int {
	switch {
	case n <= 15:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

// appendJSONString appends s as a JSON string literal. s is valid UTF-8.
func appendJSONString(b, s []byte) []byte {
	b = append(b, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigit = "0123456789abcdef"

// appendJSONFloat appends f as JSON, or reports false for NaN and the
// infinities, which JSON cannot write.
func appendJSONFloat(b []byte, f float64, bits int) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits), true
}

// validString reports whether s may be a MessagePack str of the binary
// protocol: UTF-8, as JSON text must be.
func validString(s []byte) bool { return utf8.Valid(s) }
