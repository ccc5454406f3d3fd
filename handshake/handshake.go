package handshake

// STUB: the API other packages build against. The handshake helper replaces
// the bodies (and adds doc.go, tests, benchmarks); signatures stay.

import (
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rtserver/rtserver/metrics"
)

// RejectMode is how a shed upgrade is answered.
type RejectMode int

const (
	RejectHTTP  RejectMode = iota // 503 / 429 with Retry-After and a JSON body
	RejectClose                   // complete the upgrade, close with 1013 retry_after_ms=N
)

// Config of the gate (CONTRACT section 4 and the handshake/auth keys of
// section 5). Zero caps mean off.
type Config struct {
	MaxConnections int
	MaxConcurrent  int
	PerTickBudget  int
	Tick           time.Duration
	MaxQueueWait   time.Duration
	Reject         RejectMode
	RetryAfter     time.Duration // base of the jittered hint
	PerIPLimit     int           // upgrades per PerIPPer per client IP; 0 = off
	PerIPPer       time.Duration
	PerIPMaxKeys   int // bound of the per-IP store; 0 = 65536
	TrustedProxies []netip.Prefix
	AllowedOrigins []string // glob patterns; empty = same host only
	AllowNoOrigin  bool
	JWTHMACSecret  []byte // HS256 key; empty and no public key = anonymous
	JWTPublicKey   []byte // PEM of an RSA or EC public key (RS256 / ES256)
	Now            func() time.Time
}

// DefaultConfig is CONTRACT section 5's handshake block.
func DefaultConfig() Config {
	return Config{
		MaxConcurrent: 1000,
		PerTickBudget: 64,
		Tick:          10 * time.Millisecond,
		MaxQueueWait:  2 * time.Second,
		RetryAfter:    time.Second,
		PerIPPer:      10 * time.Second,
		AllowNoOrigin: true,
	}
}

// Identity is who an admitted upgrade is.
type Identity struct {
	IP    netip.Addr // resolved client IP (trusted proxies applied)
	IPKey string     // rate-limit key: the IP, or its /64 for IPv6
	User  string     // JWT sub; "" when anonymous
}

// Ticket holds the slots of one admitted upgrade. The caller owns it (the
// server embeds it in its connection) so admitting allocates nothing.
type Ticket struct {
	Identity
	g *Gate
}

// HandshakeDone ends the in-flight part: it releases the maxConcurrent
// slot. ok=false (the upgrade failed) also releases the connection slot.
// Exactly once; later calls do nothing.
func (t *Ticket) HandshakeDone(ok bool) {}

// Close releases the connection slot when the connection ends. Idempotent.
func (t *Ticket) Close() {}

// Gate is the handshake tier.
type Gate struct {
	cfg      Config
	m        *metrics.Metrics
	draining atomic.Bool
}

// New validates cfg and returns a gate.
func New(cfg Config, m *metrics.Metrics) (*Gate, error) { return &Gate{cfg: cfg, m: m}, nil }

// Admit runs the checks of CONTRACT section 4 in order. When it returns
// false the request has been answered (per Reject mode; 403/401 for origin
// and auth) and nothing is held. When true, t holds the slots.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request, t *Ticket) bool {
	t.g = g
	return true
}

// SetDraining makes every later (and every waiting) upgrade be rejected
// with reason draining.
func (g *Gate) SetDraining(on bool) { g.draining.Store(on) }

// Inflight is the number of upgrades in flight.
func (g *Gate) Inflight() int64 { return 0 }

// Open is the number of connection slots held (open connections).
func (g *Gate) Open() int64 { return 0 }
