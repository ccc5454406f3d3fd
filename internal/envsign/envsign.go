// Package envsign signs and checks the envelopes rtserver instances send
// each other over Redis: bus messages, bus control messages and the
// cluster aggregator's rate slices. One fleet secret signs them all, so
// each kind's MAC covers a domain label of its own before the bytes: a
// signature made for one kind never verifies as another.
//
// It owns the one replay rule of signed envelopes: an envelope whose
// sender's clock (the stamp it carries) is further than Window from the
// receiver's clock is refused. Kinds that must act at most once (bus
// control messages) add their own record of what was accepted on top
// (the bus does, see docs/cluster.md).
//
// It must never allocate per envelope: keyed MACs are pooled, and
// received payloads (strings) are hashed through a fixed buffer.
package envsign

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
	"time"
)

// Domain is the label that separates one kind of envelope's signatures
// from another's.
type Domain string

// The kinds of envelope rtserver signs.
const (
	BusMessage Domain = "rtserver bus message v1"
	BusControl Domain = "rtserver bus control v1"
	RateSlice  Domain = "rtserver rate slice v1"
	// RateView is the merged view a merging instance publishes
	// (publishRate.mode merged).
	RateView Domain = "rtserver rate view v1"
	// MergerLease is the lease value of the merging instance, in Redis.
	MergerLease Domain = "rtserver merger lease v1"
)

// Size is the length of a MAC.
const Size = sha256.Size

// Window bounds how far a signed envelope's stamp may be from the
// receiver's clock: the fleet's clocks must agree within it (run NTP).
const Window = 30 * time.Second

// Signer holds the fleet key. A nil *Signer means unsigned envelopes; New
// returns nil for an empty key.
type Signer struct {
	macs sync.Pool // of *keyedMAC
	now  func() time.Time
}

// keyedMAC is a pooled keyed MAC with room for its sum and for copying a
// received (string) payload into it a chunk at a time: hashing a string
// through the hash.Hash interface would otherwise allocate a copy of the
// whole payload, and the sum would escape, on every received envelope.
type keyedMAC struct {
	h     hash.Hash
	sum   [Size]byte
	chunk [512]byte
}

// New returns a signer for key, or nil when key is empty.
func New(key []byte) *Signer {
	if len(key) == 0 {
		return nil
	}
	key = append([]byte(nil), key...)
	s := &Signer{now: time.Now}
	s.macs.New = func() any { return &keyedMAC{h: hmac.New(sha256.New, key)} }
	return s
}

// Now is the signer's clock in Unix milliseconds: the stamp a sender
// puts in its envelope.
func (s *Signer) Now() int64 { return s.now().UnixMilli() }

// Fresh is the replay rule against this instance's clock.
func (s *Signer) Fresh(stamp int64) bool { return Fresh(s.now(), stamp) }

// Fresh is the replay rule: whether a stamp (Unix milliseconds, the
// sender's clock) is within Window of now (the receiver's clock).
func Fresh(now time.Time, stamp int64) bool {
	age := now.Sub(time.UnixMilli(stamp))
	return age <= Window && age >= -Window
}

// AppendMAC appends the MAC of msg under domain d to dst.
func (s *Signer) AppendMAC(dst []byte, d Domain, msg []byte) []byte {
	m := s.macs.Get().(*keyedMAC)
	m.h.Reset()
	m.writeString(string(d))
	m.chunk[0] = 0
	m.h.Write(m.chunk[:1])
	m.h.Write(msg)
	dst = m.h.Sum(dst)
	s.macs.Put(m)
	return dst
}

// MAC computes the MAC of msg under domain d without allocating.
func (s *Signer) MAC(d Domain, msg string) [Size]byte {
	m := s.macs.Get().(*keyedMAC)
	m.h.Reset()
	m.writeString(string(d))
	m.chunk[0] = 0
	m.h.Write(m.chunk[:1])
	m.writeString(msg)
	sum := [Size]byte(m.h.Sum(m.sum[:0]))
	s.macs.Put(m)
	return sum
}

// Equal compares two MACs in constant time.
func Equal(a [Size]byte, b string) bool {
	return len(b) == Size && hmac.Equal(a[:], []byte(b))
}

func (m *keyedMAC) writeString(s string) {
	for len(s) > 0 {
		n := copy(m.chunk[:], s)
		m.h.Write(m.chunk[:n])
		s = s[n:]
	}
}
