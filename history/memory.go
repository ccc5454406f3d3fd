package history

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Memory is the in-process store, the embedded default: a stream per
// topic, each with its own epoch (a restart changes every epoch).
//
// Bounds: a stream keeps at most its policy's Size messages, none older
// than its TTL (trimmed as it is published to or read); an idle topic's
// position is forgotten MetaTTL after its last publish; and everything
// together stays under MemoryMaxBytes: past it, the least recently
// published topics lose their streams and positions (their next epoch is
// new), counted by Evicted.
//
// Only a publish creates a stream. A read of a topic that has none keeps
// nothing: it answers offset 0 in the epoch the topic's first publish will
// take (epochOf), so that anyone may ask about any number of made-up
// topics without the store growing, and a subscriber of an empty topic
// still recovers its first messages. So the streams are at most the
// publishes, and one publish's sweep removes at most what that publish
// added (a message's bytes, at least streamOverhead a stream) plus two.
//
// Delivery: Publish calls the Deliver it was built with for each new
// message under the topic's lock, so the instance's subscribers see a
// topic's messages in offset order whatever the publishers race.
type Memory struct {
	cfg     Config
	evicted prometheus.Counter

	deliver func(topic string, epoch string, m Message) // MemoryDeps.Deliver

	// mu guards topics, lru, idem, bytes and gens. Lock order: a stream's
	// mu, then mu (mu is never held while taking a stream's mu, except by
	// evict, which only try-locks).
	mu     sync.Mutex
	topics map[string]*stream
	lru    list.List // of *stream, most recently published first
	idem   map[string]idemEntry
	idemQ  []idemKey // in expiry order (one TTL for all)
	bytes  int64
	// gens counts the streams removed per slot of topics (a hash of the
	// name): a topic's epoch is derived from its slot's count, so a topic
	// that loses its stream gets a new epoch without the store keeping
	// anything per topic it does not hold.
	gens [genSlots]uint32
	seed maphash.Seed
	salt uint64 // random per store: a restart changes every epoch
}

// genSlots is the number of removal counters: more slots, fewer topics
// whose unheld epoch moves when another topic of their slot is removed
// (which costs a subscriber of an empty topic one recovery, nothing more).
const genSlots = 1024

type stream struct {
	topic string
	elem  *list.Element

	mu        sync.Mutex
	dead      bool // evicted: look the topic up again
	epoch     string
	last      uint64
	msgs      []Message // oldest first
	bytes     int64     // of msgs
	touched   time.Time // last publish
	ttl       time.Duration
	accounted int64 // bytes this stream has added to Memory.bytes
}

type idemEntry struct {
	pos     Position
	expires time.Time
}

type idemKey struct {
	key     string
	expires time.Time
}

// Per-item overheads counted against MemoryMaxBytes, beyond the bytes of
// data and names: what a Message, a map entry and a list element cost.
const (
	msgOverhead    = 48
	streamOverhead = 256
	idemOverhead   = 96
)

// MemoryDeps are what a Memory store uses beside its configuration.
type MemoryDeps struct {
	// Evicted counts topics that lost their streams to MemoryMaxBytes
	// (history_evictions_total). nil: not counted.
	Evicted prometheus.Counter
	// Deliver hands each stored message to the instance's subscribers
	// (the server's DeliverHistory). It runs under the topic's lock, in
	// offset order: it must not block, and must not call back into the
	// store for the same topic. nil: nothing is delivered.
	Deliver func(topic string, epoch string, m Message)
}

// NewMemory returns an empty memory store.
func NewMemory(cfg Config, deps MemoryDeps) (*Memory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Memory{cfg: cfg.WithDefaults(), evicted: deps.Evicted, deliver: deps.Deliver,
		topics: map[string]*stream{}, idem: map[string]idemEntry{},
		seed: maphash.MakeSeed()}
	var salt [8]byte
	_, _ = rand.Read(salt[:])
	m.salt = binary.LittleEndian.Uint64(salt[:])
	return m, nil
}

var _ Store = (*Memory)(nil)

// Publish stores p.Data, calls Deliver with it, and returns its position.
func (m *Memory) Publish(_ context.Context, p Publish) (Position, bool, error) {
	now := time.Now()
	var ikey string
	if p.IdempotencyKey != "" {
		ikey = p.Topic + "\x00" + p.IdempotencyKey
		m.mu.Lock()
		e, ok := m.idem[ikey]
		m.mu.Unlock()
		if ok && now.Before(e.expires) {
			return e.pos, true, nil
		}
	}
	for {
		s := m.stream(p.Topic, now)
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			continue
		}
		if ikey != "" {
			// Checked again under the topic's lock: two publishes with
			// one key racing store only one message.
			m.mu.Lock()
			e, ok := m.idem[ikey]
			m.mu.Unlock()
			if ok && now.Before(e.expires) {
				s.mu.Unlock()
				return e.pos, true, nil
			}
		}
		s.ttl = p.Policy.TTL
		s.trim(now, p.Policy.Size-1)
		s.last++
		msg := Message{Offset: s.last, Time: now.UnixMilli(), Data: append([]byte(nil), p.Data...)}
		s.msgs = append(s.msgs, msg)
		s.bytes += int64(len(msg.Data)) + msgOverhead
		s.touched = now
		pos := Position{Epoch: s.epoch, Offset: s.last}
		if m.deliver != nil {
			m.deliver(p.Topic, s.epoch, msg)
		}
		delta := s.bytes + streamOverhead + int64(len(s.topic)) - s.accounted
		s.accounted += delta
		s.mu.Unlock()

		m.mu.Lock()
		m.bytes += delta
		if ikey != "" {
			exp := now.Add(m.cfg.IdempotencyTTL)
			m.idem[ikey] = idemEntry{pos: pos, expires: exp}
			m.idemQ = append(m.idemQ, idemKey{key: ikey, expires: exp})
			m.bytes += int64(len(ikey)) + idemOverhead
		}
		m.sweep(now, s)
		m.mu.Unlock()
		return pos, false, nil
	}
}

// stream returns topic's stream, creating it (offset 0, in the epoch
// epochOf gives it) if need be, and marks it most recently published.
func (m *Memory) stream(topic string, now time.Time) *stream {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.topics[topic]
	if s == nil {
		s = &stream{topic: topic, epoch: m.epochOf(topic), touched: now}
		s.elem = m.lru.PushFront(s)
		m.topics[topic] = s
		s.accounted = streamOverhead + int64(len(topic))
		m.bytes += s.accounted
	} else {
		m.lru.MoveToFront(s.elem)
	}
	return s
}

// lookup returns topic's stream, or nil and the epoch the topic's first
// publish will take.
func (m *Memory) lookup(topic string) (*stream, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.topics[topic]; s != nil {
		return s, ""
	}
	return nil, m.epochOf(topic)
}

// slot is topic's removal counter.
func (m *Memory) slot(topic string) int {
	return int(maphash.String(m.seed, topic) % genSlots)
}

// epochOf is the epoch of a stream topic does not have yet: 8 hex digits
// of a bijective mix of the store's salt, the topic's slot and the
// removals counted there. Every removal in the slot moves it, so a
// position of a removed stream never names its successor (as with random
// epochs, up to a 2^-32 chance of two epochs agreeing). Caller holds mu.
func (m *Memory) epochOf(topic string) string {
	sl := m.slot(topic)
	x := m.salt ^ uint64(sl)<<32 ^ uint64(m.gens[sl])
	// splitmix64's finaliser: a bijection, so distinct inputs stay
	// distinct before the cut to 32 bits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(x))
	return hex.EncodeToString(b[:])
}

// trim drops messages past keep (the newest keep stay) and those older
// than the stream's TTL. Caller holds s.mu.
func (s *stream) trim(now time.Time, keep int) {
	drop := 0
	if keep >= 0 && len(s.msgs) > keep {
		drop = len(s.msgs) - keep
	}
	if s.ttl > 0 {
		oldest := now.Add(-s.ttl).UnixMilli()
		for drop < len(s.msgs) && s.msgs[drop].Time < oldest {
			drop++
		}
	}
	if drop == 0 {
		return
	}
	for _, msg := range s.msgs[:drop] {
		s.bytes -= int64(len(msg.Data)) + msgOverhead
	}
	clear(s.msgs[:drop])
	s.msgs = s.msgs[drop:]
	if len(s.msgs) == 0 {
		s.msgs = nil // let the array go
	}
}

// sweep forgets expired idempotency keys, ages the least recently
// published topics (their messages past TTL, their positions past
// MetaTTL), and evicts while the store is over its cap. It never takes
// keep's lock (the caller's stream), and only try-locks others: the lock
// order is a stream's, then mu. Caller holds mu.
func (m *Memory) sweep(now time.Time, keep *stream) {
	for len(m.idemQ) > 0 && !now.Before(m.idemQ[0].expires) {
		k := m.idemQ[0].key
		if e, ok := m.idem[k]; ok && !now.Before(e.expires) {
			delete(m.idem, k)
			m.bytes -= int64(len(k)) + idemOverhead
		}
		m.idemQ[0] = idemKey{}
		m.idemQ = m.idemQ[1:]
	}
	// Age up to two of the oldest topics per publish: enough to keep up
	// with the publishes that create them, without a goroutine.
	for i, e := 0, m.lru.Back(); i < 2 && e != nil; i++ {
		s := e.Value.(*stream)
		e = e.Prev()
		if s == keep || !s.mu.TryLock() {
			continue
		}
		if now.Sub(s.touched) > m.cfg.MetaTTL {
			m.remove(s)
		} else {
			s.trim(now, -1)
			m.bytes += s.bytes + streamOverhead + int64(len(s.topic)) - s.accounted
			s.accounted = s.bytes + streamOverhead + int64(len(s.topic))
		}
		s.mu.Unlock()
	}
	for e := m.lru.Back(); m.bytes > m.cfg.MemoryMaxBytes && e != nil; {
		s := e.Value.(*stream)
		e = e.Prev()
		if s == keep || !s.mu.TryLock() {
			continue
		}
		m.remove(s)
		s.mu.Unlock()
		if m.evicted != nil {
			m.evicted.Inc()
		}
	}
}

// remove forgets s, and moves the epoch its topic's next stream takes.
// Caller holds mu and s.mu.
func (m *Memory) remove(s *stream) {
	s.dead = true
	m.gens[m.slot(s.topic)]++
	m.lru.Remove(s.elem)
	delete(m.topics, s.topic)
	m.bytes -= s.accounted
	s.accounted = 0
	s.msgs = nil
}

// Read returns topic's position and up to limit messages after after
// (Newest: the newest limit).
func (m *Memory) Read(_ context.Context, topic string, after uint64, limit int, policy Policy) (Position, []Message, error) {
	now := time.Now()
	for {
		s, epoch := m.lookup(topic)
		if s == nil {
			return Position{Epoch: epoch}, nil, nil
		}
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			continue
		}
		if policy.TTL > 0 {
			s.ttl = policy.TTL
		}
		s.trim(now, -1)
		pos := Position{Epoch: s.epoch, Offset: s.last}
		if after == Newest {
			after = s.last - min(s.last, uint64(max(limit, 0)))
		}
		var out []Message
		if n := len(s.msgs); n > 0 && after < s.last && limit > 0 {
			first := s.msgs[0].Offset
			i := 0
			if after >= first {
				i = int(after - first + 1)
			}
			j := min(n, i+limit)
			out = append(out, s.msgs[i:j]...) // the Data arrays are never modified
		}
		s.mu.Unlock()
		return pos, out, nil
	}
}

// Bytes is what the store holds now, as counted against MemoryMaxBytes.
func (m *Memory) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}
