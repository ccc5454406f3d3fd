package bus

import (
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/rtserver/rtserver/protocol"
)

// The envelope is how one bus message travels as a Redis pub/sub payload:
//
//	byte 0        version, 0x01
//	uvarint       n, the length of the sender's instance id (at most MaxInstanceIDLen)
//	n bytes       the instance id
//	uvarint       m, the length of the topic
//	m bytes       the topic
//	the rest      the message data, raw JSON as published
//
// A binary header in front of the untouched JSON data means neither side
// escapes or re-parses the data to frame it: encoding is two copies, and
// decoding is a few slice operations on the payload plus one json.Valid
// pass. Redis payloads are binary-safe, so nothing needs escaping.
const envelopeVersion = 0x01

// MaxInstanceIDLen is the longest instance id an envelope carries.
const MaxInstanceIDLen = 128

// envelopeOverhead bounds the header: version, two uvarints of at most two
// bytes each, the instance id and the topic.
const envelopeOverhead = 1 + 2 + MaxInstanceIDLen + 2 + protocol.MaxTopicLen

// DefaultMaxEnvelopeBytes is the default size cap on received envelopes:
// 1 MiB of data plus the largest header.
const DefaultMaxEnvelopeBytes = 1<<20 + envelopeOverhead

// ErrTooLarge is returned by Publish when the envelope would exceed the
// size cap that every receiver applies; the message is dropped and counted
// (reason oversize) instead of being sent to be dropped on every sibling.
var ErrTooLarge = errors.New("bus: message over the envelope size cap")

// appendEnvelope appends the envelope of one message to dst.
func appendEnvelope(dst []byte, instance, topic string, data []byte) []byte {
	return append(appendHeader(dst, envelopeVersion, instance, topic), data...)
}

// appendHeader appends the header every envelope kind shares: version,
// instance id and topic (or key).
func appendHeader(dst []byte, version byte, instance, topic string) []byte {
	dst = append(dst, version)
	dst = appendUvarint(dst, uint64(len(instance)))
	dst = append(dst, instance...)
	dst = appendUvarint(dst, uint64(len(topic)))
	return append(dst, topic...)
}

func envelopeLen(instance, topic string, data []byte) int {
	return 1 + uvarintLen(uint64(len(instance))) + len(instance) +
		uvarintLen(uint64(len(topic))) + len(topic) + len(data)
}

// decodeEnvelope splits a received payload into its parts without copying.
// reason is "" when the envelope is well-formed, else the drop reason; own
// is true (with reason "") when the envelope came from self and must be
// suppressed without counting. Data is checked to be valid JSON only for
// envelopes that pass every cheaper check.
func decodeEnvelope(p string, self string, maxBytes int) (topic, data string, own bool, reason string) {
	return splitEnvelope(p, envelopeVersion, self, maxBytes, validDataTopic)
}

// validDataTopic reports whether a data envelope's topic is one a client
// could have published on.
func validDataTopic(topic string) bool {
	return protocol.ValidTopic(topic) && !protocol.Reserved(topic)
}

// splitEnvelope is decodeEnvelope for either envelope kind: version is the
// kind's first byte, and validKey decides its topic or control key.
func splitEnvelope(p string, version byte, self string, maxBytes int, validKey func(string) bool) (key, data string, own bool, reason string) {
	if len(p) > maxBytes {
		return "", "", false, DropOversize
	}
	if len(p) == 0 || p[0] != version {
		return "", "", false, DropMalformed
	}
	rest := p[1:]
	inst, rest, ok := readField(rest, MaxInstanceIDLen)
	if !ok {
		return "", "", false, DropMalformed
	}
	key, rest, ok = readField(rest, len(rest))
	if !ok {
		return "", "", false, DropMalformed
	}
	if inst == self {
		return "", "", true, ""
	}
	if !validKey(key) {
		return "", "", false, DropBadTopic
	}
	return key, rest, false, ""
}

// validData reports whether data, the copied data part of an envelope, is
// one JSON value in valid UTF-8. It runs on the copy that is delivered, so
// checking costs no extra allocation. json.Valid alone passes invalid
// UTF-8 inside strings, and a browser fails its whole connection on a text
// frame that is not UTF-8: anyone who can publish to Redis could otherwise
// disconnect every browser subscribed to a topic.
func validData(data []byte) bool {
	return len(data) > 0 && utf8.Valid(data) && json.Valid(data)
}

// readField reads a uvarint length (at most limit) and that many bytes.
func readField(s string, limit int) (field, rest string, ok bool) {
	n, w := readUvarint(s)
	if w <= 0 || n > uint64(limit) || n > uint64(len(s)-w) {
		return "", "", false
	}
	end := w + int(n)
	return s[w:end], s[end:], true
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// readUvarint decodes a uvarint of at most 3 bytes (lengths here are far
// below 2^21) from the front of s: it returns the value and the bytes
// read, or w <= 0 when s does not start with one.
func readUvarint(s string) (v uint64, w int) {
	for i := 0; i < len(s) && i < 3; i++ {
		c := s[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}
