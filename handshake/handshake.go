package handshake

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/ratelimit"
)

// Identity is who an admitted upgrade is.
type Identity struct {
	IP    netip.Addr // resolved client IP (trusted proxies applied)
	IPKey string     // rate-limit key: the IP, or its /64 for IPv6
	User  string     // JWT sub; "" when anonymous
	// Expires is the token's exp; zero when anonymous or the token has none.
	Expires time.Time
	// Topics is the token's "topics" claim; nil when absent or anonymous.
	Topics *TopicClaim
	// Claims is the token's payload (its claims, as a JSON object) once
	// the signature checked out; nil when anonymous.
	Claims json.RawMessage
}

// TopicClaim is a token's "topics" claim: the globs of topics its user may
// subscribe to and publish on (the `claim` grant; see docs/access-control.md).
type TopicClaim struct {
	Subscribe []string `json:"subscribe"`
	Publish   []string `json:"publish"`
}

// Ticket state bits: which slots a ticket holds.
const (
	holdInflight uint32 = 1 << iota // a MaxConcurrent slot (and the inflight gauge)
	holdSlot                        // a MaxConnections slot
	holdOpen                        // the upgrade finished: an open connection
)

// Ticket holds the slots of one admitted upgrade. The caller owns it (the
// server embeds it in its connection) so admitting allocates nothing. It
// must not be copied after Admit. Admitting with a ticket that still holds
// slots first releases them (as Close).
type Ticket struct {
	Identity
	g     *Gate
	state atomic.Uint32
}

// HandshakeDone ends the in-flight part: it releases the maxConcurrent
// slot. ok=false (the upgrade failed) also releases the connection slot.
// Exactly once; later calls do nothing.
func (t *Ticket) HandshakeDone(ok bool) {
	var old uint32
	for {
		old = t.state.Load()
		if old&holdInflight == 0 {
			return
		}
		next := old &^ holdInflight
		if ok {
			next |= holdOpen
		} else {
			next &^= holdSlot
		}
		if t.state.CompareAndSwap(old, next) {
			break
		}
	}
	g := t.g
	g.releaseInflight()
	if ok {
		g.m.HandshakeAccepted.Inc()
	} else if old&holdSlot != 0 {
		g.releaseSlot()
	}
}

// Close releases the connection slot when the connection ends, and the
// in-flight slot if HandshakeDone was never called. Idempotent; a no-op
// on a Ticket that holds nothing.
func (t *Ticket) Close() {
	old := t.state.Swap(0)
	if old == 0 {
		return
	}
	g := t.g
	if old&holdInflight != 0 {
		g.releaseInflight()
	}
	if old&holdSlot != 0 {
		g.releaseSlot()
	}
}

// reason indexes the rejection reasons of handshake_rejected_total.
type reason uint8

const (
	rMaxConnections reason = iota
	rMaxConcurrent
	rQueueTimeout
	rPerIP
	rOrigin
	rAuth
	rDraining
	nReasons
)

var reasonLabel = [nReasons]string{
	rMaxConnections: metrics.RejectMaxConnections,
	rMaxConcurrent:  metrics.RejectMaxConcurrent,
	rQueueTimeout:   metrics.RejectQueueTimeout,
	rPerIP:          metrics.RejectPerIP,
	rOrigin:         metrics.RejectOrigin,
	rAuth:           metrics.RejectAuth,
	rDraining:       metrics.RejectDraining,
}

// reasonGone is the pacer's answer when the client went away while
// waiting: not a rejection (nobody is left to answer), so not counted.
const reasonGone = "gone"

// nominalCapacity is the upgrades per second the retry hint assumes the
// instance absorbs when pacing is off.
const nominalCapacity = 1000.0

// Gate is the handshake tier.
type Gate struct {
	cfg      Config
	m        *metrics.Metrics
	log      *slog.Logger
	draining atomic.Bool

	// slots packs both counts in one word so that reserving both is one
	// CAS: connection slots held in the high 32 bits, upgrades in flight
	// in the low 32. Each decrement undoes an earlier increment of the
	// same half, so the halves never borrow from each other.
	slots atomic.Uint64

	maxConns, maxConc int64
	perIP             *ratelimit.Keyed
	origin            originPolicy
	auth              *Verifier
	pacer             *pacer
	now               func() time.Time // Deps.now
	epoch             time.Time

	base, maxHint time.Duration
	capacity      float64 // upgrades per second, for the hint
	shed          shedCounter
	rejected      [nReasons]prometheus.Counter
	authRefused   map[string]prometheus.Counter // by metrics.AuthRefusalReasons
}

// perIPMaxKeys bounds the per-IP store (LRU): 65,536 addresses (IPv6 /64s).
const perIPMaxKeys = 65536

// New validates cfg and returns a gate. m nil means metrics.NewDiscard().
func New(cfg Config, deps Deps) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, log, now := deps.Metrics, deps.Logger, deps.now
	if now == nil {
		now = time.Now
	}
	if m == nil {
		m = metrics.NewDiscard()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.TrustedProxies = append([]netip.Prefix(nil), cfg.TrustedProxies...)
	for i, p := range cfg.TrustedProxies {
		cfg.TrustedProxies[i] = p.Masked()
	}
	g := &Gate{
		cfg:      cfg,
		m:        m,
		log:      log,
		maxConns: int64(cfg.MaxConnections),
		maxConc:  int64(cfg.MaxConcurrent),
		now:      now,
		epoch:    now(),
		base:     cfg.RetryAfter,
		maxHint:  60 * cfg.RetryAfter,
		capacity: nominalCapacity,
	}
	var err error
	if g.origin, err = newOriginPolicy(cfg.AllowedOrigins, cfg.AllowNoOrigin); err != nil {
		return nil, err
	}
	g.auth = deps.Tokens
	if cfg.PerIP.Limit > 0 {
		g.perIP = ratelimit.NewKeyed(cfg.PerIP.Limit, cfg.PerIP.Per, perIPMaxKeys)
	}
	if cfg.PerTickBudget > 0 {
		g.pacer = newPacer(&cfg, g.clock, m)
		g.capacity = float64(cfg.PerTickBudget) / cfg.Tick.Seconds()
	}
	for i := range g.rejected {
		g.rejected[i] = m.HandshakeRejected.WithLabelValues(reasonLabel[i])
	}
	g.authRefused = make(map[string]prometheus.Counter, len(metrics.AuthRefusalReasons))
	for _, r := range metrics.AuthRefusalReasons {
		g.authRefused[r] = m.HandshakeAuthRefused.WithLabelValues(r)
	}
	// The gauges read the slot word when scraped: admit and release touch
	// one atomic word and no gauge. Open connections are the slots held
	// by upgrades that finished (every upgrade in flight holds one too).
	m.HandshakeInflight.SetFunc(func() float64 { return float64(g.Inflight()) })
	m.ConnectionsOpen.SetFunc(func() float64 {
		v := g.slots.Load()
		return float64(int64(v>>32) - int64(v&inflightMask))
	})
	return g, nil
}

// clock is the gate's clock as nanoseconds since the gate was made.
func (g *Gate) clock() int64 { return int64(g.now().Sub(g.epoch)) }

// Admit runs the checks of docs/handshake.md in order. When it returns
// false the request has been answered (per Reject mode; 403/401 for origin
// and auth) and nothing is held. When true, t holds the slots: the caller
// must end them with t.HandshakeDone (after websocket.Accept, passing
// InsecureSkipVerify since the gate checked Origin) and t.Close.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request, t *Ticket) bool {
	if t.state.Load() != 0 {
		t.Close() // a reused ticket gives back what it still held, once
	}

	// 1. Caps: reserve a connection slot, then an in-flight slot.
	if why, ok := g.reserve(); !ok {
		g.shedOverload(w, r, why)
		return false
	}
	t.g = g
	t.state.Store(holdInflight | holdSlot)
	t.IP, t.IPKey = requestClientIP(r, g.cfg.TrustedProxies)
	t.User, t.Expires, t.Topics, t.Claims = "", time.Time{}, nil, nil

	// 2. Per-client-IP upgrade rate.
	if g.perIP != nil {
		if res := g.perIP.Allow(t.IPKey, g.now()); !res.Allowed {
			t.Close()
			g.rejected[rPerIP].Inc()
			ms := rateHint(res.RetryAfter)
			if g.cfg.Reject == RejectClose {
				closeShed(w, r, ms)
			} else {
				retryhint.Answer(w, http.StatusTooManyRequests, retryhint.HeadRateLimited, ms)
			}
			return false
		}
	}

	// 3. Origin: always plain 403.
	if !g.origin.allowed(r) {
		t.Close()
		g.rejected[rOrigin].Inc()
		plainError(w, http.StatusForbidden, originRefusal(r.Header.Get("Origin")))
		return false
	}

	// 4. Authentication: always plain 401.
	if g.auth != nil {
		if err := g.auth.verify(r, &t.Identity); err != nil {
			t.Close()
			g.refuseToken(w, err, t.IPKey)
			return false
		}
	}

	// 5. Pacing.
	if g.pacer != nil {
		switch why := g.pacer.wait(r.Context()); why {
		case "":
		case reasonGone:
			t.Close() // nobody is left to answer
			return false
		case metrics.RejectDraining:
			t.Close()
			g.shedOverload(w, r, rDraining)
			return false
		default:
			t.Close()
			g.shedOverload(w, r, rQueueTimeout)
			return false
		}
	}

	// 6. Draining.
	if g.draining.Load() {
		t.Close()
		g.shedOverload(w, r, rDraining)
		return false
	}
	return true
}

// shedOverload counts and answers a 503-class rejection. The caller holds
// no slot by now.
func (g *Gate) shedOverload(w http.ResponseWriter, r *http.Request, why reason) {
	g.rejected[why].Inc()
	ms := g.overloadHint(g.clock())
	if g.cfg.Reject == RejectClose {
		closeShed(w, r, ms)
		return
	}
	retryhint.Answer(w, http.StatusServiceUnavailable, retryhint.HeadOverloaded, ms)
}

// SetDraining makes every later (and every waiting) upgrade be rejected
// with reason draining.
func (g *Gate) SetDraining(on bool) {
	g.draining.Store(on)
	if g.pacer != nil {
		g.pacer.setDraining(on)
	}
}

// Draining reports whether the gate is draining.
func (g *Gate) Draining() bool { return g.draining.Load() }

// Inflight is the number of upgrades in flight.
func (g *Gate) Inflight() int64 { return int64(g.slots.Load() & inflightMask) }

// Open is the number of connection slots held: open connections plus
// upgrades in flight (each reserves its slot at arrival).
func (g *Gate) Open() int64 { return int64(g.slots.Load() >> 32) }

// QueueDepth is the number of upgrades waiting for a pacing tick.
func (g *Gate) QueueDepth() int {
	if g.pacer == nil {
		return 0
	}
	return g.pacer.queueLen()
}

func (g *Gate) releaseInflight() {
	g.slots.Add(^uint64(0)) // -1 in the low half
}

func (g *Gate) releaseSlot() { g.slots.Add(^(connUnit - 1)) } // -connUnit

const (
	connUnit     uint64 = 1 << 32
	inflightMask uint64 = connUnit - 1
	// maxSlots bounds each half when its cap is off (0): 2^31 upgrades in
	// flight or connections is far beyond any process, so this only
	// keeps the halves from overflowing.
	maxSlots = 1<<31 - 1
)

// reserve takes a connection slot and an in-flight slot together, if
// both are below their caps (a zero cap is no cap).
func (g *Gate) reserve() (reason, bool) {
	for {
		v := g.slots.Load()
		if why, full := g.capsFull(v); full {
			return why, false
		}
		if g.slots.CompareAndSwap(v, v+connUnit+1) {
			return 0, true
		}
	}
}

// doorFull reports whether the door should shed an upgrade now, and under
// which reason: a cap is full (step 1), or the pacing queue is at its bound
// so a newcomer would be refused queue_timeout at step 5 anyway.
func (g *Gate) doorFull() (reason, bool) {
	if why, full := g.capsFull(g.slots.Load()); full {
		return why, true
	}
	if g.pacer != nil && g.pacer.overflowing() {
		return rQueueTimeout, true
	}
	return 0, false
}

// capsFull is step 1's decision on slot word v: which cap (connections
// first) leaves no room for one more upgrade. Admit (through reserve) and
// the door (Listener) both decide with it, so the door sheds exactly what
// Admit would shed for the caps at that instant.
func (g *Gate) capsFull(v uint64) (reason, bool) {
	maxConns, maxConc := uint64(g.maxConns), uint64(g.maxConc)
	if maxConns == 0 {
		maxConns = maxSlots
	}
	if maxConc == 0 {
		maxConc = maxSlots
	}
	if v>>32 >= maxConns {
		return rMaxConnections, true
	}
	if v&inflightMask >= maxConc {
		return rMaxConcurrent, true
	}
	return 0, false
}
