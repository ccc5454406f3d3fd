package sse

import "encoding/binary"

// WebSocket opcodes (RFC 6455 section 5.2) the pipe reads or writes.
const (
	opText  = 0x1
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// appendClientFrame appends one final client frame: masked, as a server
// requires of every client frame, with an all-zero key (the bytes never
// leave the process, and a zero key leaves the payload as it is).
func appendClientFrame(b []byte, op byte, payload []byte) []byte {
	b = append(b, 0x80|op)
	n := len(payload)
	switch {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xFFFF:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, 0, 0, 0, 0)
	return append(b, payload...)
}

// nextServerFrame reads the frame at the start of b, an unmasked server
// frame: its opcode, payload and length in b. n is 0 when b holds only
// part of it. Fragments are not expected (the server writes every
// message in one frame); a continuation frame is reported as its opcode,
// 0, and skipped by the caller.
func nextServerFrame(b []byte) (op byte, payload []byte, n int) {
	if len(b) < 2 {
		return 0, nil, 0
	}
	op = b[0] & 0x0F
	size, head := uint64(b[1]&0x7F), 2
	switch size {
	case 126:
		if len(b) < 4 {
			return 0, nil, 0
		}
		size, head = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return 0, nil, 0
		}
		size, head = binary.BigEndian.Uint64(b[2:]), 10
	}
	if b[1]&0x80 != 0 {
		head += 4 // a masked frame would be a bug of the server's; keep framing right
	}
	if size > uint64(len(b)-head) {
		return 0, nil, 0
	}
	end := head + int(size)
	return op, b[head:end], end
}
