package bus

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/protocol"
)

// Control messages are what the server API sends to the instances that may
// hold a user's connections (disconnect, unsubscribe). They travel on the
// same channels and Redis connections as data messages, as a second
// envelope kind, so they add no connection, and they never reach topic
// subscribers: the Receiver gets them through DeliverControl.
//
// A control message is routed by a key, a reserved name such as UserKey(U).
// The memory and single-channel buses hand every control message to every
// other instance. The sharded bus puts it on the key's partition, which an
// instance subscribes while it has declared interest in the key with
// Subscribe(key): the server does so for every user with a connection on
// it, so a user's control messages reach exactly the instances (and
// partitions) that can act on them.
//
// The control envelope has the data envelope's layout (see envelope.go)
// with version byte 0x03, the key in the topic's place, and the message's
// fleet sequence number (8 bytes, big-endian) before the data. An
// instance that predates this layout drops it as malformed (counted):
// during a rolling upgrade, control messages reach only upgraded
// instances.
//
// Single use. With signed envelopes, a control message must act once,
// fleet-wide and across restarts: a captured disconnect published again
// must not disconnect the user again, neither on an instance that acted
// on it nor on one started since. The sender numbers each control message
// from a fleet counter in Redis (INCR ChannelPrefix+"ctl:seq"); a
// receiver accepts a number only once (per sender, a high-water mark and
// a window of the numbers just below it: see replayWin; beyond the
// replay window the stamp refuses it anyway), and only above its
// subscription's floor: the counter's value when Redis confirmed the
// subscription, which never goes down (a lost or garbled counter refuses
// rather than admits). Whatever was numbered before a
// subscription existed is older than it, so an instance started (or a
// partition subscribed) after a disconnect was sent refuses its replay,
// while every instance that was subscribed when it was sent, and only
// those, act on it once. Unsigned control messages are not numbered:
// without a secret anyone could forge them anyway.
const controlVersion = 0x03

// seqLen is the length of a control envelope's sequence number.
const seqLen = 8

// MaxControlKeyLen is the longest control key: the "__user:" prefix plus
// a user id of up to 1 KiB.
const MaxControlKeyLen = len(userKeyPrefix) + 1024

const userKeyPrefix = "__user:"

// UserKey is the control key of a user's connections. It is reserved (it
// starts with "__"), so no client can subscribe it.
func UserKey(user string) string { return userKeyPrefix + user }

// validControlKey reports whether key can route a control message.
func validControlKey(key string) bool {
	return len(key) <= MaxControlKeyLen && protocol.Reserved(key) && len(key) > 2
}

// appendControl appends the control envelope of one message to dst.
func appendControl(dst []byte, instance, key string, seq uint64, data []byte) []byte {
	dst = appendHeader(dst, controlVersion, instance, key)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return append(dst, data...)
}

// isControl reports whether a received payload is a control envelope.
func isControl(p string) bool { return len(p) > 0 && p[0] == controlVersion }

// decodeControl splits a received control envelope like decodeEnvelope
// does a data envelope; the key must be a valid control key.
func decodeControl(p string, self string, maxBytes int) (sender, key string, seq uint64, data string, own bool, reason string) {
	key, rest, own, reason := splitEnvelope(p, controlVersion, self, maxBytes, validControlKey)
	if own || reason != "" {
		return "", "", 0, "", own, reason
	}
	if len(rest) < seqLen {
		return "", "", 0, "", false, DropMalformed
	}
	sender, _, _ = readField(p[1:], MaxInstanceIDLen) // splitEnvelope read it
	return sender, key, binary.BigEndian.Uint64([]byte(rest[:seqLen])), rest[seqLen:], false, ""
}

// publishControl validates, numbers (when signed), encodes and queues one
// control message (see control.go), and waits for Redis to take it.
func (e *engine) publishControl(channel, key string, data []byte) error {
	if !validControlKey(key) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	var seq uint64
	if e.signer != nil {
		if e.degraded() {
			e.dropDegraded.Inc()
			return ErrDegraded
		}
		var err error
		if seq, err = e.ctl.next(e.pingWait); err != nil {
			e.dropDegraded.Inc()
			e.log.Warn("bus: cannot number a control message", "err", err)
			return ErrDegraded
		}
	}
	return e.enqueue(e.ctlOut, channel, key, data, seqLen, func(dst []byte, instance, key string, data []byte) []byte {
		return appendControl(dst, instance, key, seq, data)
	})
}

// maxSenders bounds the senders whose control numbers are remembered;
// past it (after forgetting the idle ones) a new sender's control messages
// are refused rather than accepted without a record.
const maxSenders = 4096

// pruneSenders is the count past which a new sender first makes the guard
// forget the senders idle for longer than the replay window.
const pruneSenders = 256

// controlGuard numbers control messages and admits each number once.
type controlGuard struct {
	client redis.UniversalClient
	key    string // the fleet counter

	mu      sync.Mutex
	senders map[string]*replayWin // by sender instance id
}

// replayWin is what a receiver remembers of one sender's control numbers:
// the highest admitted (hwm) and which of the winSize numbers up to it
// were. A sender's numbers rise (they come from one fleet counter) and
// arrive nearly in order (its few writers may overtake one another), so
// a number above hwm is new, one in the window is new unless its bit is
// set, and one below the window is refused: O(1) per message and
// winSize/8 bytes per sender, whatever the rate. A replay within the
// stamp's window finds its bit set or falls below the window; a replay
// after it is refused by the stamp.
type replayWin struct {
	hwm  uint64
	last int64 // stamp (ms) of the newest admitted: idle senders are forgotten
	bits [winSize / 64]uint64
}

// winSize is how far below a sender's newest number an overtaken one is
// still admitted: the fleet's control numbers given out while one of its
// messages waits behind another of the same sender's.
const winSize = 4096

func (w *replayWin) admit(seq uint64, stamp int64) bool {
	switch {
	case seq > w.hwm:
		from := max(w.hwm+1, seq-min(seq, winSize-1))
		w.clear(from, seq)
		w.hwm = seq
	case w.hwm-seq >= winSize:
		return false
	case w.bits[seq%winSize/64]&(1<<(seq%64)) != 0:
		return false
	}
	w.bits[seq%winSize/64] |= 1 << (seq % 64)
	w.last = max(w.last, stamp)
	return true
}

// clear unsets the bits of numbers from..to (at most winSize of them), a
// word at a time.
func (w *replayWin) clear(from, to uint64) {
	for from <= to {
		i := from % winSize
		n := min(64-i%64, to-from+1)
		mask := ^uint64(0)
		if n < 64 {
			mask = (uint64(1)<<n - 1) << (i % 64)
		}
		w.bits[i/64] &^= mask
		from += n
	}
}

// controlFloor is one subscription's floor: control numbers at or below
// it were given out before the subscription was confirmed. -1: unknown
// (reading the counter failed), read again when needed.
type controlFloor struct{ v atomic.Int64 }

func newControlGuard(client redis.UniversalClient, prefix string) *controlGuard {
	return &controlGuard{client: client, key: prefix + "ctl:seq", senders: map[string]*replayWin{}}
}

// next takes the next number from the fleet counter.
func (g *controlGuard) next(timeout time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := g.client.Incr(ctx, g.key).Result()
	return uint64(n), err
}

// confirmed sets f from the counter: called when Redis (re)confirms a
// subscription, before any message that follows is handled. The floor
// never goes down: a counter that went missing (a flushed or restarted
// Redis) or holds something else must not let numbers given out before
// count as new again. Unreadable on a first confirmation: unknown, and
// control messages are refused until it can be read.
func (g *controlGuard) confirmed(f *controlFloor, timeout time.Duration) {
	v, err := g.read(timeout)
	if err != nil {
		return // keep what it was (-1 at first: unknown)
	}
	f.raise(v)
}

// raise sets the floor to v unless it is higher already.
func (f *controlFloor) raise(v int64) {
	for {
		cur := f.v.Load()
		if cur >= v || f.v.CompareAndSwap(cur, v) {
			return
		}
	}
}

// read is the counter's value; a missing counter reads 0 (no number given
// out yet, or Redis lost it: raise keeps any higher floor), anything but
// an integer is an error.
func (g *controlGuard) read(timeout time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	v, err := g.client.Get(ctx, g.key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

// admit reports whether control number seq from sender, stamped stamp
// (already checked against the replay window), is new: above the floor
// of the subscription it came through and not accepted before.
func (g *controlGuard) admit(f *controlFloor, sender string, seq uint64, stamp int64, now int64, timeout time.Duration) bool {
	if f.v.Load() < 0 {
		v, err := g.read(timeout)
		if err != nil {
			return false // cannot tell: refuse rather than act twice
		}
		f.raise(v)
	}
	if seq == 0 || seq <= uint64(f.v.Load()) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.senders[sender]
	if w == nil {
		if len(g.senders) >= pruneSenders {
			for id, o := range g.senders {
				if now-o.last > 2*replayWindow.Milliseconds() {
					delete(g.senders, id)
				}
			}
			if len(g.senders) >= maxSenders {
				return false
			}
		}
		w = &replayWin{}
		g.senders[sender] = w
	}
	return w.admit(seq, stamp)
}
