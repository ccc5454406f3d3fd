package history

import (
	"container/list"
	"context"
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
// Delivery: Publish calls Deliver (set before use) with each new message
// under the topic's lock, so the instance's subscribers see a topic's
// messages in offset order whatever the publishers race.
type Memory struct {
	cfg     Config
	now     func() time.Time
	evicted prometheus.Counter

	// Deliver hands a stored message to the instance's subscribers. It
	// runs under the topic's lock: it must not block, and must not call
	// back into the store for the same topic.
	Deliver func(topic string, epoch string, m Message)

	// mu guards topics, lru, idem and bytes. Lock order: a stream's mu,
	// then mu (mu is never held while taking a stream's mu, except by
	// evict, which only try-locks).
	mu     sync.Mutex
	topics map[string]*stream
	lru    list.List // of *stream, most recently published first
	idem   map[string]idemEntry
	idemQ  []idemKey // in expiry order (one TTL for all)
	bytes  int64
}

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

// MemoryOptions configures NewMemory.
type MemoryOptions struct {
	Config Config
	// Evicted counts topics that lost their streams to MemoryMaxBytes
	// (history_evictions_total). nil: not counted.
	Evicted prometheus.Counter
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// NewMemory returns an empty memory store.
func NewMemory(o MemoryOptions) *Memory {
	m := &Memory{cfg: o.Config.WithDefaults(), now: o.Now, evicted: o.Evicted,
		topics: map[string]*stream{}, idem: map[string]idemEntry{}}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

var _ Store = (*Memory)(nil)

// Publish stores p.Data, calls Deliver with it, and returns its position.
func (m *Memory) Publish(_ context.Context, p Publish) (Position, bool, error) {
	now := m.now()
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
		s := m.stream(p.Topic, now, true)
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
		if m.Deliver != nil {
			m.Deliver(p.Topic, s.epoch, msg)
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

// stream returns topic's stream, creating it (a new epoch, offset 0) when
// create is set, and marks it most recently used when it is published to.
func (m *Memory) stream(topic string, now time.Time, publish bool) *stream {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.topics[topic]
	if s == nil {
		s = &stream{topic: topic, epoch: newEpoch(), touched: now}
		if publish {
			s.elem = m.lru.PushFront(s)
		} else {
			// Created by a read (a subscriber of an empty topic, or anyone
			// asking about any topic): first in line for eviction, so
			// reads of made-up topics cannot push out real streams.
			s.elem = m.lru.PushBack(s)
		}
		m.topics[topic] = s
		s.accounted = streamOverhead + int64(len(topic))
		m.bytes += s.accounted
	} else if publish {
		m.lru.MoveToFront(s.elem)
	}
	return s
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

// remove forgets s. Caller holds mu and s.mu.
func (m *Memory) remove(s *stream) {
	s.dead = true
	m.lru.Remove(s.elem)
	delete(m.topics, s.topic)
	m.bytes -= s.accounted
	s.accounted = 0
	s.msgs = nil
}

// Read returns topic's position and up to limit messages after after
// (Newest: the newest limit).
func (m *Memory) Read(_ context.Context, topic string, after uint64, limit int, policy Policy) (Position, []Message, error) {
	now := m.now()
	for {
		s := m.stream(topic, now, false)
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
