package handshake

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rtserver/rtserver/metrics"
)

// tb is what the helpers need of a *testing.T, *testing.B or *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// authConfig is a gate's configuration with the auth.jwt section (and
// the in-memory public key) that its Verifier is built from.
type authConfig struct {
	Config
	JWT       JWT
	PublicKey []byte
}

// authed is DefaultConfig with no key yet: anonymous connections.
func authed() authConfig { return authConfig{Config: DefaultConfig()} }

// gateConfig is a Config, or an authConfig.
type gateConfig interface{ split() authConfig }

func (c Config) split() authConfig     { return authConfig{Config: c} }
func (c authConfig) split() authConfig { return c }

// newAuthed is New with a Verifier built from cfg's auth part on deps'
// clock and logger, as a node builds it.
func newAuthed(cfg gateConfig, deps Deps) (*Gate, error) {
	c := cfg.split()
	tokens, err := NewVerifier(c.JWT, VerifierDeps{PublicKey: c.PublicKey, Logger: deps.Logger, now: deps.now})
	if err != nil {
		return nil, err
	}
	deps.Tokens = tokens
	return New(c.Config, deps)
}

// newGate is New with discarded metrics (and log, unless one is given).
func newGate(t tb, cfg gateConfig, log ...*slog.Logger) (*Gate, *metrics.Metrics) {
	t.Helper()
	return newGateAt(t, cfg, nil, log...)
}

// newGateAt is newGate on the clock now (nil: time.Now).
func newGateAt(t tb, cfg gateConfig, now func() time.Time, log ...*slog.Logger) (*Gate, *metrics.Metrics) {
	t.Helper()
	m := metrics.NewDiscard()
	deps := Deps{Metrics: m, now: now}
	for _, l := range log {
		deps.Logger = l
	}
	g, err := newAuthed(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return g, m
}

// upgradeReq is a WebSocket upgrade request from peer.
func upgradeReq(peer string) *http.Request {
	r := httptest.NewRequest("GET", "http://rt.example.com/ws", nil)
	r.RemoteAddr = peer
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return r
}

func rejected(m *metrics.Metrics, reason string) float64 {
	return testutil.ToFloat64(m.HandshakeRejected.WithLabelValues(reason))
}

// assertIdle checks that nothing is held and every gauge is back at zero.
func assertIdle(t tb, g *Gate, m *metrics.Metrics) {
	t.Helper()
	if g.Inflight() != 0 || g.Open() != 0 || g.QueueDepth() != 0 {
		t.Fatalf("held: inflight %d open %d queue %d", g.Inflight(), g.Open(), g.QueueDepth())
	}
	for name, v := range map[string]float64{
		"handshake_inflight":    testutil.ToFloat64(m.HandshakeInflight),
		"connections_open":      testutil.ToFloat64(m.ConnectionsOpen),
		"handshake_queue_depth": testutil.ToFloat64(m.HandshakeQueueDepth),
	} {
		if v != 0 {
			t.Fatalf("gauge %s = %v, want 0", name, v)
		}
	}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
