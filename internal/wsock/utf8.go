package wsock

import (
	"bytes"
	"io"
	"unicode/utf8"
)

// UTF8 validates a text message as its bytes arrive (RFC 6455 section
// 8.1), failing at the first byte after which no valid UTF-8 can follow,
// whether the message's fragments or reads split a character or not: an
// invalid sequence in a first fragment is refused before the next one
// comes. The zero value starts a message.
type UTF8 struct {
	part [utf8.UTFMax]byte // the start of a character whose rest is to come
	n    uint8
}

// Write takes the next bytes of the message and reports whether
// everything so far can still be the start of valid UTF-8.
func (v *UTF8) Write(p []byte) bool {
	for v.n > 0 && len(p) > 0 {
		v.part[v.n] = p[0]
		v.n++
		p = p[1:]
		if !utf8.FullRune(v.part[:v.n]) {
			continue // a valid start, still short of a character
		}
		r, size := utf8.DecodeRune(v.part[:v.n])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		v.n = 0
	}
	if len(p) == 0 || utf8.Valid(p) {
		return true
	}
	for i := 0; i < len(p); {
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r != utf8.RuneError || size > 1 {
			i += size
			continue
		}
		// Invalid, or the valid start of a character cut by the end
		// of p (FullRune is false only for the latter).
		if utf8.FullRune(p[i:]) {
			return false
		}
		v.n = uint8(copy(v.part[:], p[i:]))
		return true
	}
	return true
}

// Complete reports whether the message may end here: no character is
// left unfinished.
func (v *UTF8) Complete() bool { return v.n == 0 }

// Payload is the rule a message's payload is read by, whoever reads its
// frames (this package's reader, or the WebSocket library's on the
// portable path): at most one byte past limit (then ErrTooBig), and text
// checked as it arrives (ErrInvalidUTF8), a byte within the limit before
// the limit itself, so the outcome does not depend on how reads cut the
// message.
type Payload struct {
	limit int64
	text  bool
	utf8  UTF8
}

// NewPayload starts a message read into a buffer of at most limit bytes.
func NewPayload(limit int64, text bool) Payload { return Payload{limit: limit, text: text} }

// Room is how many more bytes dst may take: up to one past the limit.
func (p *Payload) Room(dst *bytes.Buffer) int64 { return p.limit + 1 - int64(dst.Len()) }

// Took checks the n bytes just appended to dst.
func (p *Payload) Took(dst *bytes.Buffer, n int) error {
	if p.text {
		b := dst.Bytes()
		end := min(int64(len(b)), p.limit)
		if start := int64(len(b) - n); start < end && !p.utf8.Write(b[start:end]) {
			return ErrInvalidUTF8
		}
	}
	if int64(dst.Len()) > p.limit {
		return ErrTooBig
	}
	return nil
}

// End checks a message read whole.
func (p *Payload) End() error {
	if p.text && !p.utf8.Complete() {
		return ErrInvalidUTF8
	}
	return nil
}

// minRead is the least room a read of a payload is given
// (bytes.MinRead's).
const minRead = 512

// ReadPayload reads a message from r (the WebSocket library's message
// reader) into dst by the rule of Payload: the portable path's read.
// Bytes that come with an error are not looked at: the library returns
// the bytes of a cut frame still masked.
func ReadPayload(dst *bytes.Buffer, r io.Reader, limit int64, text bool) error {
	p := NewPayload(limit, text)
	for {
		if cap(dst.AvailableBuffer()) < minRead {
			dst.Grow(minRead)
		}
		b := dst.AvailableBuffer()
		b = b[:min(int64(cap(b)), p.Room(dst))]
		n, err := r.Read(b)
		if err != nil {
			if err == io.EOF {
				return p.End()
			}
			return err
		}
		dst.Write(b[:n])
		if err := p.Took(dst, n); err != nil {
			return err
		}
	}
}
