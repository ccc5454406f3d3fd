package wsock

import "encoding/binary"

// Frame heads: FIN and the opcode, the first byte of an unfragmented frame
// (RFC 6455 section 5.2).
const (
	TextHead  = 0x81
	CloseHead = 0x88
	PingHead  = 0x89
	PongHead  = 0x8A
)

// MaxHeader is the longest header of an unmasked frame.
const MaxHeader = 10

// PingFrame is an unmasked ping with no payload.
var PingFrame = []byte{PingHead, 0x00}

// AppendTextHeader appends the header of an unmasked, final text frame
// with an n-byte payload.
func AppendTextHeader(b []byte, n int) []byte {
	b = append(b, TextHead)
	switch {
	case n < 126:
		return append(b, byte(n))
	case n <= 0xFFFF:
		return append(b, 126, byte(n>>8), byte(n))
	}
	return append(b, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// TextPayload is the payload of an unmasked text frame built with
// AppendTextHeader.
func TextPayload(f []byte) []byte {
	switch f[1] {
	case 126:
		return f[4:]
	case 127:
		return f[10:]
	}
	return f[2:]
}

// CloseFrame is an unmasked close frame with code and reason (cut to 123
// bytes: a control frame's payload is at most 125).
func CloseFrame(code uint16, reason string) []byte {
	reason = reason[:min(len(reason), 123)]
	b := make([]byte, 0, 4+len(reason))
	b = append(b, CloseHead, byte(2+len(reason)), byte(code>>8), byte(code))
	return append(b, reason...)
}

// FrameEnd is where the frame holding byte n-1 of b ends, b being whole
// frames: b[n:FrameEnd(b, n)] is the rest of a frame begun.
func FrameEnd(b []byte, n int) int {
	i := 0
	for i < n {
		i = nextFrame(b, i)
	}
	return min(i, len(b))
}

// nextFrame is where the frame that starts at b[i] ends (len(b) when b
// ends first).
func nextFrame(b []byte, i int) int {
	if i+2 > len(b) {
		return len(b)
	}
	size, head := uint64(b[i+1]&0x7F), 2
	switch size {
	case 126:
		if i+4 > len(b) {
			return len(b)
		}
		size, head = uint64(binary.BigEndian.Uint16(b[i+2:])), 4
	case 127:
		if i+10 > len(b) {
			return len(b)
		}
		size, head = binary.BigEndian.Uint64(b[i+2:]), 10
	}
	if b[i+1]&0x80 != 0 {
		head += 4 // a mask key (a client's frame)
	}
	if i+head > len(b) || size > uint64(len(b)-i-head) {
		return len(b)
	}
	return i + head + int(size)
}
