package history

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/rtserver/rtserver/internal/conf"
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
	Size int           `yaml:"size" json:"size" help:"history: keep the last size messages of each topic (with ttl > 0); 0 = no history"`
	TTL  time.Duration `yaml:"ttl" json:"ttl" help:"history: keep each message this long (with size > 0; at least the drain plus the reconnect backoff plus a retry hint: 2m or more, docs/history.md); 0 = no history"`
}

// Enabled reports whether the topic keeps history.
func (p Policy) Enabled() bool { return p.Size > 0 && p.TTL > 0 }

// Validate checks a policy; key names it in the errors (e.g.
// "topics.namespaces[0].history").
func (p Policy) Validate(key string) error {
	var pr conf.Problems
	switch {
	case p.Size < 0:
		pr.Add(key+".size", "must not be negative, got %d", p.Size)
	case p.Size > MaxSize:
		pr.Add(key+".size", "at most %d, got %d", MaxSize, p.Size)
	}
	if p.TTL < 0 {
		pr.Add(key+".ttl", "must not be negative, got %s", p.TTL)
	}
	if (p.Size > 0) != (p.TTL > 0) {
		pr.Add(key, "size and ttl must both be set (or both 0: no history), got size %d and ttl %s", p.Size, p.TTL)
	}
	return pr.Err()
}

// MaxSize bounds Policy.Size.
const MaxSize = 1_000_000

// Config is the history.* keys. The zero value of each field is its
// documented default.
type Config struct {
	// MetaTTL is how long a topic's epoch and last offset outlive its
	// last message, so a client that comes back after the messages expired
	// learns that they did ("trimmed") rather than "epoch". 0: 720h.
	MetaTTL time.Duration `yaml:"metaTtl" json:"metaTtl" help:"how long a topic's epoch and last offset outlive its messages; 0 = 720h"`
	// MaxReplay is the most messages one recovery replays; more answers
	// recovered:false, reason "tooMany". 0: 10000.
	MaxReplay int `yaml:"maxReplay" json:"maxReplay" help:"most messages one recovery replays; more answers recovered:false, reason tooMany; 0 = 10000"`
	// IdempotencyTTL is how long a publish's idempotencyKey is remembered.
	// 0: 300s.
	IdempotencyTTL time.Duration `yaml:"idempotencyTtl" json:"idempotencyTtl" help:"how long a publish's idempotencyKey is remembered; 0 = 300s"`
	// MemoryMaxBytes caps everything the memory store holds (messages,
	// positions, idempotency keys). Past it, the least recently published
	// topics lose their streams and get a new epoch. 0: 128 MiB.
	MemoryMaxBytes int64 `yaml:"memoryMaxBytes" json:"memoryMaxBytes" help:"without Redis: the most bytes the in-process history holds; past it the least recently published topics lose their streams (new epoch); 0 = 128 MiB"`
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

// Validate reports every invalid history.* key at once.
func (c Config) Validate() error {
	var p conf.Problems
	if c.MetaTTL < 0 {
		p.Add("history.metaTtl", "must not be negative, got %s", c.MetaTTL)
	}
	if c.MaxReplay < 0 {
		p.Add("history.maxReplay", "must not be negative, got %d", c.MaxReplay)
	}
	if c.IdempotencyTTL < 0 {
		p.Add("history.idempotencyTtl", "must not be negative, got %s", c.IdempotencyTTL)
	}
	if c.MemoryMaxBytes < 0 {
		p.Add("history.memoryMaxBytes", "must not be negative, got %d", c.MemoryMaxBytes)
	}
	return p.Err()
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
	// policy.TTL. A topic that has no position yet answers offset 0 in
	// the epoch its first publish takes, so that a subscriber of an empty
	// topic can recover; the memory store keeps nothing for it, Redis a
	// small hash for 2 TTL (reads must not grow a store without bound).
	Read(ctx context.Context, topic string, after uint64, limit int, policy Policy) (Position, []Message, error)
}

// ErrUnavailable wraps every store failure that may pass (Redis down or
// slow): callers answer HISTORY_UNAVAILABLE with a retry hint, never
// "recovered: false".
var ErrUnavailable = errors.New("history: store unavailable")

// ErrNoHistory is the error for a topic that keeps no history: one value
// whichever part answers (the server, Node, the server API).
var ErrNoHistory = errors.New("topic keeps no history")

// newEpoch returns a fresh epoch: 8 random hex digits.
func newEpoch() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
