package handshake

import (
	"encoding/pem"
	"fmt"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/metrics"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path"
	"time"

	"github.com/rtserver/rtserver/internal/conf"
)

// RejectMode is how a shed upgrade is answered.
type RejectMode int

const (
	RejectHTTP  RejectMode = iota // 503 / 429 with Retry-After and a JSON body
	RejectClose                   // complete the upgrade, close with 1013 and the hint (docs/handshake.md)
)

var rejectWords = [...]string{RejectHTTP: "http", RejectClose: "close"}

// MarshalText is the config word: http or close.
func (m RejectMode) MarshalText() ([]byte, error) {
	if m < 0 || int(m) >= len(rejectWords) {
		return nil, fmt.Errorf("unknown reject mode %d", int(m))
	}
	return []byte(rejectWords[m]), nil
}

// UnmarshalText reads the config word http or close.
func (m *RejectMode) UnmarshalText(b []byte) error {
	for i, w := range rejectWords {
		if string(b) == w {
			*m = RejectMode(i)
			return nil
		}
	}
	return fmt.Errorf("want http or close")
}

// Config of the gate: the handshake.* keys of docs/configuration.md (the
// auth.jwt.* keys are JWT, which a Verifier in Deps checks tokens by). The
// zero value has no caps, no pacing, a 1s retry hint and same-host
// origins only.
type Config struct {
	MaxConnections int            `yaml:"maxConnections" help:"open WebSocket connections on this instance; 0 = no cap"`
	MaxConcurrent  int            `yaml:"maxConcurrent" help:"upgrades in flight, from arrival to the end of the handshake; 0 = no cap"`
	PerTickBudget  int            `yaml:"perTickBudget" help:"upgrades completed per tick; 0 = no pacing"`
	Tick           time.Duration  `yaml:"tick" help:"pacing period; must be positive when perTickBudget > 0"`
	MaxQueueWait   time.Duration  `yaml:"maxQueueWait" help:"longest a paced upgrade waits in the FIFO queue before it is rejected; 0 = reject the excess at once"`
	Reject         RejectMode     `yaml:"reject" help:"how a shed upgrade is answered: http (503/429 with Retry-After) | close (upgrade, then close 1013)"`
	RetryAfter     time.Duration  `yaml:"retryAfter" help:"base of the jittered retry hint given to rejected clients; 0 = 1s"`
	PerIP          PerIP          `yaml:"perIP"`
	TrustedProxies []netip.Prefix `yaml:"trustedProxies" help:"CIDRs of proxies whose X-Forwarded-For is believed"`
	AllowedOrigins []string       `yaml:"allowedOrigins" help:"Origin glob patterns (path.Match syntax); empty: same host only"`
	AllowNoOrigin  bool           `yaml:"allowNoOrigin" help:"admit upgrades that carry no Origin header (non-browser clients)"`
}

// PerIP is the per-client-IP upgrade rate (handshake.perIP.*).
type PerIP struct {
	Limit int           `yaml:"limit" help:"upgrades per client IP (IPv6: per /64) per period; 0 = off"`
	Per   time.Duration `yaml:"per" help:"the period of handshake.perIP.limit; must be positive when the limit is set"`
}

// JWT selects how tokens are verified (auth.jwt.*). HMACSecret,
// PublicKey (or PublicKeyFile) and JWKSURL all empty: anonymous
// connections. Several may be set: a token is verified by the key its alg
// (and kid, for the key set) selects; a token without kid goes to the
// fixed public key.
type JWT struct {
	HMACSecret    []byte `yaml:"hmacSecret" help:"HS256 key (the raw bytes of this string); empty with no publicKeyFile or jwksUrl: anonymous connections"`
	PublicKeyFile string `yaml:"publicKeyFile" help:"PEM file with the RSA or EC public key for RS256 / ES256 tokens; read at start-up"`
	// JWKSURL serves a JSON Web Key Set: RS256 / ES256 keys picked by the
	// token's kid, fetched by New (an error stops it), cached, and
	// fetched again when an unknown kid arrives or the set is an hour
	// old, at most once per 30s.
	JWKSURL string `yaml:"jwksUrl" help:"http(s) URL of a JSON Web Key Set: RS256 / ES256 keys picked by the token's kid; fetched at start-up (failure stops it), cached, fetched again when an unknown kid arrives or the set is an hour old, at most once per 30s"`
	// Audience and Issuer, when set, must be the token's aud (one of
	// them) and iss; otherwise the upgrade is refused with 401.
	Audience string `yaml:"audience" help:"when set, a token's aud must contain it, else 401"`
	Issuer   string `yaml:"issuer" help:"when set, a token's iss must equal it, else 401"`
	// RequireExp refuses a token without exp (or with "exp": null): such
	// a token never expires, so one that leaks is good forever. Off, the
	// gate warns at start-up. MaxLifetime, when positive, also refuses a
	// token whose exp is further ahead than it (and one without exp),
	// bounding what a token minted by mistake for years is worth.
	RequireExp  bool          `yaml:"requireExp" help:"refuse a token without exp (or with exp null) with 401, reason lifetime; off: such a token never expires, and start-up logs a warning (docs/authentication.md)"`
	MaxLifetime time.Duration `yaml:"maxLifetime" help:"when > 0, refuse a token whose exp is further ahead than this, or that has no exp, with 401, reason lifetime; 0 = no bound"`
}

// Deps are what a Gate uses beside its configuration.
type Deps struct {
	Metrics *metrics.Metrics // nil: metrics.NewDiscard()
	// Logger receives each refused token's reason at debug level, the
	// warning for a validly signed token whose topics claim has the wrong
	// shape (a backend bug), and panics while serving an upgrade; nil =
	// discard.
	Logger *slog.Logger
	// Tokens checks the token of each upgrade (auth.jwt.*, NewVerifier);
	// nil: anonymous connections.
	Tokens *Verifier

	// now is the clock for the per-IP rate, pacing windows and the retry
	// hint; nil = time.Now. Pacing waits on real timers,
	// so with pacing on it must advance with real time (a frozen clock
	// would never open a new tick): tests of pacing run in
	// testing/synctest, where both are the bubble's fake clock.
	now func() time.Time
}

// DefaultConfig is the handshake.* defaults of docs/configuration.md.
func DefaultConfig() Config {
	return Config{
		MaxConcurrent: 1000,
		PerTickBudget: 64,
		Tick:          10 * time.Millisecond,
		MaxQueueWait:  2 * time.Second,
		RetryAfter:    retryhint.DefaultBase,
		PerIP:         PerIP{Per: 10 * time.Second},
		AllowNoOrigin: true,
	}
}

// withDefaults gives the zero values that mean a default their value.
func (c Config) withDefaults() Config {
	if c.RetryAfter == 0 {
		c.RetryAfter = retryhint.DefaultBase
	}
	return c
}

// Validate reports every invalid handshake.* value at once, naming each
// key (errors.Join of *conf.KeyError).
func (c Config) Validate() error {
	var p conf.Problems
	p.NonNegative("handshake.maxConnections", int64(c.MaxConnections))
	p.NonNegative("handshake.maxConcurrent", int64(c.MaxConcurrent))
	p.NonNegative("handshake.perTickBudget", int64(c.PerTickBudget))
	switch {
	case c.PerTickBudget > 0 && c.Tick <= 0:
		p.Add("handshake.tick", "must be a positive duration when handshake.perTickBudget is set, got %s", c.Tick)
	case c.Tick < 0:
		p.Add("handshake.tick", "must not be negative, got %s", c.Tick)
	}
	if c.MaxQueueWait < 0 {
		p.Add("handshake.maxQueueWait", "must not be negative, got %s", c.MaxQueueWait)
	}
	if _, err := c.Reject.MarshalText(); err != nil {
		p.Add("handshake.reject", "must be http or close, got %d", int(c.Reject))
	}
	if c.RetryAfter < 0 {
		p.Add("handshake.retryAfter", "must not be negative, got %s", c.RetryAfter)
	}
	p.NonNegative("handshake.perIP.limit", int64(c.PerIP.Limit))
	switch {
	case c.PerIP.Limit > 0 && c.PerIP.Per <= 0:
		p.Add("handshake.perIP.per", "must be a positive duration when handshake.perIP.limit is set, got %s", c.PerIP.Per)
	case c.PerIP.Per < 0:
		p.Add("handshake.perIP.per", "must not be negative, got %s", c.PerIP.Per)
	}
	for i, pfx := range c.TrustedProxies {
		if !pfx.IsValid() {
			p.Add(fmt.Sprintf("handshake.trustedProxies[%d]", i), "invalid CIDR %v (want e.g. 10.0.0.0/8 or fd00::/8)", pfx)
		}
	}
	for i, o := range c.AllowedOrigins {
		key := fmt.Sprintf("handshake.allowedOrigins[%d]", i)
		if o == "" {
			p.Add(key, "empty pattern")
		} else if _, err := path.Match(o, ""); err != nil {
			p.Add(key, "bad glob pattern %q (path.Match syntax)", o)
		}
	}
	return p.Err()
}

// Validate reports every invalid auth.jwt.* value at once. It reads
// PublicKeyFile to check that it holds a PEM block.
func (j JWT) Validate() error { return j.ValidateWith(VerifierDeps{}) }

// ValidateWith is Validate knowing deps.PublicKey, as NewVerifier checks j:
// with a key in memory, PublicKeyFile is not read.
func (j JWT) ValidateWith(deps VerifierDeps) error {
	var p conf.Problems
	noKey := len(j.HMACSecret) == 0 && len(deps.PublicKey) == 0 && j.PublicKeyFile == "" && j.JWKSURL == ""
	if noKey && (j.Audience != "" || j.Issuer != "") {
		p.Add("auth.jwt", "audience and issuer need a key: set hmacSecret, publicKeyFile or jwksUrl")
	}
	if j.MaxLifetime < 0 {
		p.Add("auth.jwt.maxLifetime", "must not be negative, got %s", j.MaxLifetime)
	}
	if j.JWKSURL != "" {
		if u, err := url.Parse(j.JWKSURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Add("auth.jwt.jwksUrl", "want an http(s) URL, got %q", j.JWKSURL)
		}
	}
	if len(deps.PublicKey) == 0 && j.PublicKeyFile != "" {
		if data, err := os.ReadFile(j.PublicKeyFile); err != nil {
			p.Add("auth.jwt.publicKeyFile", "%v", err)
		} else if b, _ := pem.Decode(data); b == nil {
			p.Add("auth.jwt.publicKeyFile", "%s holds no PEM block", j.PublicKeyFile)
		}
	}
	return p.Err()
}
