package bus

import (
	"strconv"
)

// Position envelopes carry the messages of history topics (package
// history). The history store's script assigns a message's offset where it
// stores it, and publishes, in the same atomic step, the data envelope
// that Envelope built with the position in front:
//
//	byte 0x04, the epoch, ' ', the offset in decimal, ' ', a data envelope
//
// The data envelope is signed as usual (when the bus signs); the position
// is not covered by the signature, because Redis assigns it after the
// envelope was signed: whoever can PUBLISH on the fleet's Redis can also
// write to the stream itself (docs/security.md).
//
// Unlike plain data envelopes, a position envelope is delivered to the
// instance that sent it as well: local subscribers of a history topic get
// its messages from Redis, in the one order Redis gave them, so every
// instance delivers a topic's messages in offset order.
const positionVersion = 0x04

// MaxEpochLen is the longest epoch a position envelope carries.
const MaxEpochLen = 32

// PositionReceiver is implemented by a Receiver that takes history
// topics' messages with their positions. A bus whose Receiver does not
// implement it drops position envelopes (counted, reason malformed).
type PositionReceiver interface {
	// DeliverAt hands over a message of a history topic, with its epoch
	// and offset (offset > 0). Like Deliver, it must not block for long.
	DeliverAt(topic string, data []byte, epoch string, offset uint64)
}

// HistoryPublisher is what a Redis history store needs from the Redis bus
// it publishes through: both Redis buses implement it.
type HistoryPublisher interface {
	// HistoryEnvelope encodes data on topic as the data envelope other
	// instances accept (signed when the bus signs), and returns it with
	// the channel to publish it on, whether that is a shard channel
	// (SPUBLISH), and where data starts in it (the script stores data
	// from there, without a second copy in the request).
	HistoryEnvelope(topic string, data []byte) (env []byte, channel string, sharded bool, dataAt int, err error)
}

// historyEnvelope is HistoryEnvelope for a channel.
func (e *engine) historyEnvelope(channel, topic string, data []byte) ([]byte, string, bool, int, error) {
	n := envelopeLen(e.id, topic, data)
	if e.signer != nil {
		n += stampLen + sigLen
	}
	if n > e.maxEnv-positionOverhead {
		return nil, "", false, 0, ErrTooLarge
	}
	env := appendEnvelope(make([]byte, 0, n), e.id, topic, data)
	dataAt := len(env) - len(data)
	if e.signer != nil {
		env = e.signer.sign(env)
	}
	return env, channel, e.sharded, dataAt, nil
}

// positionOverhead bounds the position in front of a data envelope.
const positionOverhead = 1 + MaxEpochLen + 1 + 20 + 1

// HistoryEnvelope implements HistoryPublisher.
func (b *Redis) HistoryEnvelope(topic string, data []byte) ([]byte, string, bool, int, error) {
	return b.e.historyEnvelope(b.channel, topic, data)
}

// HistoryEnvelope implements HistoryPublisher.
func (b *Sharded) HistoryEnvelope(topic string, data []byte) ([]byte, string, bool, int, error) {
	return b.e.historyEnvelope(b.channels[b.partition(topic)], topic, data)
}

// splitPosition takes the position off a position envelope: it returns
// the epoch, the offset and the data envelope, or ok false when p is not
// a well-formed position envelope.
func splitPosition(p string) (epoch string, offset uint64, rest string, ok bool) {
	if len(p) == 0 || p[0] != positionVersion {
		return "", 0, "", false
	}
	p = p[1:]
	i := 0
	for i < len(p) && i <= MaxEpochLen && p[i] != ' ' {
		i++
	}
	if i == 0 || i > MaxEpochLen || i == len(p) {
		return "", 0, "", false
	}
	epoch, p = p[:i], p[i+1:]
	j := 0
	for j < len(p) && j < 20 && p[j] >= '0' && p[j] <= '9' {
		j++
	}
	if j == 0 || j == len(p) || p[j] != ' ' {
		return "", 0, "", false
	}
	offset, err := strconv.ParseUint(p[:j], 10, 64)
	if err != nil || offset == 0 {
		return "", 0, "", false
	}
	return epoch, offset, p[j+1:], true
}
