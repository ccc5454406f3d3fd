package history

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Position names a place in a topic's stream: the offset of its last
// message (0 before the first) in an epoch.
type Position struct {
	Epoch  string `json:"epoch"`
	Offset uint64 `json:"offset"`
}

// Message is one stored message.
type Message struct {
	Offset uint64
	// Time is when it was stored, in Unix milliseconds (the publishing
	// instance's clock): a message older than its topic's TTL is gone.
	Time int64
	Data []byte // valid JSON, as published
}

// Policy is one topic's history: keep the last Size messages, each for
// TTL. History is on when both are positive (Enabled).
type Policy struct {
	Size int           `yaml:"size" json:"size"`
	TTL  time.Duration `yaml:"ttl" json:"ttl"`
}

// Enabled reports whether the topic keeps history.
func (p Policy) Enabled() bool { return p.Size > 0 && p.TTL > 0 }

// Validate checks a policy; key names it in the error (e.g.
// "topics.namespaces[0].history").
func (p Policy) Validate(key string) error {
	if p.Size < 0 || p.TTL < 0 {
		return fmt.Errorf("%s: size and ttl must not be negative", key)
	}
	if (p.Size > 0) != (p.TTL > 0) {
		return fmt.Errorf("%s: size and ttl must both be set (or both 0: no history)", key)
	}
	if p.Size > MaxSize {
		return fmt.Errorf("%s.size: at most %d", key, MaxSize)
	}
	return nil
}

// MaxSize bounds Policy.Size.
const MaxSize = 1_000_000

// Config is the history.* keys. The zero value of each field is its
// documented default.
type Config struct {
	// MetaTTL is how long a topic's epoch and last offset outlive its
	// last message, so a client that comes back after the messages expired
	// learns that they did ("trimmed") rather than "epoch". 0: 720h.
	MetaTTL time.Duration `yaml:"metaTtl" json:"metaTtl"`
	// MaxReplay is the most messages one recovery replays; more answers
	// recovered:false, reason "tooMany". 0: 10000.
	MaxReplay int `yaml:"maxReplay" json:"maxReplay"`
	// IdempotencyTTL is how long a publish's idempotencyKey is remembered.
	// 0: 300s.
	IdempotencyTTL time.Duration `yaml:"idempotencyTtl" json:"idempotencyTtl"`
	// MemoryMaxBytes caps everything the memory store holds (messages,
	// positions, idempotency keys). Past it, the least recently published
	// topics lose their streams and get a new epoch. 0: 128 MiB.
	MemoryMaxBytes int64 `yaml:"memoryMaxBytes" json:"memoryMaxBytes"`
}

// Defaults of Config.
const (
	DefaultMetaTTL        = 720 * time.Hour
	DefaultMaxReplay      = 10000
	DefaultIdempotencyTTL = 300 * time.Second
	DefaultMemoryMaxBytes = 128 << 20
)

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MetaTTL: DefaultMetaTTL, MaxReplay: DefaultMaxReplay, IdempotencyTTL: DefaultIdempotencyTTL, MemoryMaxBytes: DefaultMemoryMaxBytes}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.MetaTTL <= 0 {
		c.MetaTTL = d.MetaTTL
	}
	if c.MaxReplay <= 0 {
		c.MaxReplay = d.MaxReplay
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = d.IdempotencyTTL
	}
	if c.MemoryMaxBytes <= 0 {
		c.MemoryMaxBytes = d.MemoryMaxBytes
	}
	return c
}

// Validate checks the history.* keys.
func (c Config) Validate() error {
	switch {
	case c.MetaTTL < 0:
		return errors.New("history.metaTtl: must not be negative")
	case c.MaxReplay < 0:
		return errors.New("history.maxReplay: must not be negative")
	case c.IdempotencyTTL < 0:
		return errors.New("history.idempotencyTtl: must not be negative")
	case c.MemoryMaxBytes < 0:
		return errors.New("history.memoryMaxBytes: must not be negative")
	}
	return nil
}

// MaxIdempotencyKey is the longest idempotencyKey (in bytes).
const MaxIdempotencyKey = 64

// Publish describes one publish to a store.
type Publish struct {
	Topic  string
	Data   []byte // valid JSON; not kept after Publish returns (the stores copy)
	Policy Policy
	// IdempotencyKey, when not empty, is the caller's key already scoped
	// to its publisher (user, connection or server API): the same key on
	// the same topic within Config.IdempotencyTTL stores and delivers
	// nothing again and returns the first publish's position.
	IdempotencyKey string
}

// Store keeps topics' streams.
type Store interface {
	// Publish stores p.Data as the topic's next message and hands it to
	// every instance (this one included) for delivery, in offset order.
	// It returns the message's position, and dup true when the
	// idempotency key was seen (nothing was stored or delivered).
	Publish(ctx context.Context, p Publish) (pos Position, dup bool, err error)
	// Read returns the topic's position and up to limit of its messages
	// with offsets after after, oldest first, without those older than
	// policy.TTL. A topic that has no position yet gets one (offset 0, a
	// new epoch), so that a subscriber of an empty topic can recover.
	Read(ctx context.Context, topic string, after uint64, limit int, policy Policy) (Position, []Message, error)
}

// ErrUnavailable wraps every store failure that may pass (Redis down or
// slow): callers answer HISTORY_UNAVAILABLE with a retry hint, never
// "recovered: false".
var ErrUnavailable = errors.New("history: store unavailable")

// newEpoch returns a fresh epoch: 8 random hex digits.
func newEpoch() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
