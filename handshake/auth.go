package handshake

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/internal/jsonexact"
)

// maxTokenBytes bounds the work a forged token can cost: real tokens are a
// few hundred bytes.
const maxTokenBytes = 8 << 10

var (
	errNoToken   = errors.New("no token")
	errBigToken  = errors.New("token too large")
	errNoSubject = errors.New("token has no sub")
	// errBadSubject: a sub the rest of the server could not name (the
	// server API takes users of 1 to MaxUserLen bytes; a control character
	// cannot travel in the RPC proxy's X-Rtserver-User header).
	errBadSubject = errors.New("token sub is over 1024 bytes or holds a control character")
	errAlg        = errors.New("signing method not configured")
	errNoExp      = fmt.Errorf("%w: no exp, and auth.jwt.requireExp is on", errLifetime)
	errLongLife   = fmt.Errorf("%w: exp is further ahead than auth.jwt.maxLifetime", errLifetime)
	errLifetime   = errors.New("token lifetime")
	errCrit       = errors.New(`token header lists "crit" extensions, and the server understands none`)
	// errTopicsClaim wraps a validly signed token whose "topics" claim has
	// the wrong shape: a backend bug worth a log line, not an attack.
	errTopicsClaim = errors.New("topics claim")
)

// Verifier checks JWTs (docs/handshake.md, step 4), as auth.jwt.* say: a
// gate's Deps.Tokens. Each configured key
// admits exactly one algorithm: the HMAC secret HS256, an RSA public key
// RS256, a P-256 public key ES256; keys from a JWKS URL are picked by the
// token's kid and admit the algorithm of their type. The parser refuses
// every other alg (including "none"), and the key function hands out a
// key only for its own algorithm, so a token cannot make the server
// verify an HMAC with the public key (alg confusion). exp and nbf are
// enforced when present; exp is required with auth.jwt.requireExp or
// maxLifetime (otherwise a token without exp does not expire, as in
// Centrifugo); aud and iss when configured; sub is required.
type Verifier struct {
	parser     *jwt.Parser
	requireExp bool
	maxLife    time.Duration
	now        func() time.Time
	hmac       []byte
	rsa        *rsa.PublicKey
	ec         *ecdsa.PublicKey
	jwks       *jwks // nil without a JWKS URL
}

// VerifierDeps are what a Verifier uses beside auth.jwt.*.
type VerifierDeps struct {
	// PublicKey is the PEM of an RSA or EC P-256 public key held in memory
	// (from a secret store); when set, JWT.PublicKeyFile is not read.
	PublicKey []byte
	// JWKSClient fetches JWT.JWKSURL; nil = a client with a 10 s timeout.
	JWKSClient *http.Client
	// Logger receives the key set's fetch failures; nil = discard.
	Logger *slog.Logger

	now func() time.Time // token expiry and the key set's age; nil = time.Now
}

// NewVerifier validates cfg, reads its key file, fetches its key set (an
// error stops it) and returns the verifier, or nil and no error when no
// key is set (hmacSecret, publicKeyFile, jwksUrl, deps.PublicKey):
// anonymous connections. The key set is fetched again when an unknown kid
// arrives or the set is an hour old, at most once per 30s.
func NewVerifier(cfg JWT, deps VerifierDeps) (*Verifier, error) {
	if err := cfg.ValidateWith(deps); err != nil {
		return nil, err
	}
	now, log := deps.now, deps.Logger
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	secret, publicPEM := cfg.HMACSecret, deps.PublicKey
	if len(publicPEM) == 0 && cfg.PublicKeyFile != "" {
		var err error
		if publicPEM, err = os.ReadFile(cfg.PublicKeyFile); err != nil {
			return nil, fmt.Errorf("handshake: auth.jwt.publicKeyFile: %w", err)
		}
	}
	if len(secret) == 0 && len(publicPEM) == 0 && cfg.JWKSURL == "" {
		return nil, nil
	}
	v := &Verifier{}
	var algs []string
	if len(secret) > 0 {
		v.hmac = append([]byte(nil), secret...)
		algs = append(algs, "HS256")
	}
	if len(publicPEM) > 0 {
		key, err := parsePublicKey(publicPEM)
		if err != nil {
			return nil, fmt.Errorf("handshake: auth.jwt.publicKeyFile: %w", err)
		}
		switch k := key.(type) {
		case *rsa.PublicKey:
			v.rsa = k
			algs = append(algs, "RS256")
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() {
				return nil, fmt.Errorf("handshake: auth.jwt.publicKeyFile: EC key on %s, ES256 needs P-256", k.Curve.Params().Name)
			}
			v.ec = k
			algs = append(algs, "ES256")
		default:
			return nil, fmt.Errorf("handshake: auth.jwt.publicKeyFile: unsupported key type %T (want RSA or EC P-256)", key)
		}
	}
	if cfg.JWKSURL != "" {
		var err error
		if v.jwks, err = newJWKS(cfg.JWKSURL, deps.JWKSClient, now, log); err != nil {
			return nil, err
		}
		algs = append(algs, "RS256", "ES256")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(algs), jwt.WithTimeFunc(now)}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	v.parser = jwt.NewParser(opts...)
	v.requireExp = cfg.RequireExp || cfg.MaxLifetime > 0
	v.maxLife, v.now = cfg.MaxLifetime, now
	if !v.requireExp {
		log.Warn("auth.jwt.requireExp is off: a token without exp (or with exp null) never expires; set auth.jwt.requireExp: true and auth.jwt.maxLifetime (docs/authentication.md)")
	}
	return v, nil
}

func parsePublicKey(data []byte) (any, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		return c.PublicKey, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a public key", block.Type)
}

// key picks the key a token is checked with: by kid from the JWKS when
// the token names one (or no static key fits its alg), else the static
// key of its alg.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	// RFC 7515 section 4.1.11: a recipient must refuse a token whose
	// "crit" header names an extension it does not understand. The server
	// understands none, so any "crit" (even a malformed one) refuses it,
	// before a key is looked up.
	if _, ok := t.Header["crit"]; ok {
		return nil, errCrit
	}
	alg := t.Method.Alg()
	if alg == "HS256" {
		if v.hmac != nil {
			return v.hmac, nil
		}
		return nil, errAlg
	}
	if v.jwks != nil {
		kid, _ := t.Header["kid"].(string)
		if kid != "" || (alg == "RS256" && v.rsa == nil) || (alg == "ES256" && v.ec == nil) {
			return v.jwks.key(ctx, kid, alg)
		}
	}
	switch alg {
	case "RS256":
		if v.rsa != nil {
			return v.rsa, nil
		}
	case "ES256":
		if v.ec != nil {
			return v.ec, nil
		}
	}
	return nil, errAlg
}

// claims are the JWT claims the server reads. The topics claim is kept
// raw and decoded only after the signature checked out, so a forged token
// never reaches the claim parser.
type claims struct {
	jwt.RegisteredClaims
	Topics json.RawMessage `json:"topics,omitempty"`
}

// claimNames are the claims the server reads.
var claimNames = [...]string{"sub", "exp", "nbf", "iat", "aud", "iss", "jti", "topics"}

// UnmarshalJSON reads the claims by the rule every other JSON the server
// reads follows (package jsonexact, docs/protocol.md): names exact.
// encoding/json alone would take "SUB" for "sub" and keep the last of a
// repeated one, so a token whose issuer copies user-chosen keys into it
// could name another user to this server than to a backend that reads
// the same token exactly. A token holding a case variant of a claim the
// server reads, or one such claim twice, is refused.
func (c *claims) UnmarshalJSON(b []byte) error {
	if err := checkClaimNames(b); err != nil {
		return err
	}
	type plain claims // the same fields, without this method
	return json.Unmarshal(b, (*plain)(c))
}

func checkClaimNames(b []byte) error {
	var err error
	var seen [len(claimNames)]bool
	ok := jsonexact.WalkObject(b, func(key, _ []byte) bool {
		for i, name := range claimNames {
			switch {
			case string(key) == name && seen[i]:
				err = fmt.Errorf("claim %q appears twice", name)
			case string(key) == name:
				seen[i] = true
			case strings.EqualFold(string(key), name):
				err = fmt.Errorf("claim %q differs from %q only in case", key, name)
			}
		}
		return err == nil
	})
	if err == nil && !ok {
		err = errors.New("claims are not a JSON object")
	}
	return err
}

// verify checks the request's token and fills id's token fields.
func (v *Verifier) verify(r *http.Request, id *Identity) error {
	tok := tokenOf(r)
	if tok == "" {
		return errNoToken
	}
	return v.verifyToken(r.Context(), tok, id)
}

// verifyToken checks one token (signature, exp, nbf, sub, the topics
// claim's shape) and fills id's User, Expires and Topics. id is left
// untouched when the token is refused.
func (v *Verifier) verifyToken(ctx context.Context, tok string, id *Identity) error {
	if len(tok) > maxTokenBytes {
		return errBigToken
	}
	var c claims
	keyOf := func(t *jwt.Token) (any, error) { return v.key(ctx, t) }
	if _, err := v.parser.ParseWithClaims(tok, &c, keyOf); err != nil {
		return err
	}
	if v.requireExp && c.ExpiresAt == nil {
		return errNoExp
	}
	if v.maxLife > 0 && c.ExpiresAt.Sub(v.now()) > v.maxLife {
		return errLongLife
	}
	if c.Subject == "" {
		return errNoSubject
	}
	if !ValidUser(c.Subject) {
		return errBadSubject
	}
	topics, err := parseTopicClaim(c.Topics)
	if err != nil {
		return fmt.Errorf("%w of sub %q: %w", errTopicsClaim, c.Subject, err)
	}
	// The payload segment decoded, as the parser did to read it: the
	// application reads its own claims from it (server.Request.Claims).
	payload, err := v.parser.DecodeSegment(tok[strings.IndexByte(tok, '.')+1 : strings.LastIndexByte(tok, '.')])
	if err != nil {
		return err
	}
	id.User, id.Topics, id.Claims = c.Subject, topics, payload
	id.Expires = time.Time{}
	if c.ExpiresAt != nil {
		id.Expires = c.ExpiresAt.Time
	}
	return nil
}

// maxClaimGlobs bounds the globs of a topics claim per action: the claim
// grant tries them in order on every call.
const maxClaimGlobs = 64

// parseTopicClaim decodes a token's "topics" claim: absent or null is nil
// (no claim); otherwise an object with only "subscribe" and "publish",
// each an array of valid path.Match globs (at most 64). Anything else is
// an error, and the token is refused (docs/access-control.md).
func parseTopicClaim(raw json.RawMessage) (*TopicClaim, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var tc TopicClaim
	if err := dec.Decode(&tc); err != nil {
		return nil, fmt.Errorf(`want {"subscribe":[globs],"publish":[globs]}: %w`, err)
	}
	for _, side := range []struct {
		name  string
		globs []string
	}{{"subscribe", tc.Subscribe}, {"publish", tc.Publish}} {
		if len(side.globs) > maxClaimGlobs {
			return nil, fmt.Errorf("%s: %d globs, at most %d", side.name, len(side.globs), maxClaimGlobs)
		}
		for _, g := range side.globs {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				return nil, fmt.Errorf("%s: invalid glob %q", side.name, g)
			}
		}
	}
	return &tc, nil
}

// tokenOf reads "Authorization: Bearer <t>", else the token query
// parameter (browsers cannot set headers on a WebSocket upgrade). Any
// other Authorization scheme (Basic, from a page behind HTTP auth) is not
// ours and leaves the query parameter in force.
func tokenOf(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if scheme, tok, ok := strings.Cut(a, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	if r.URL == nil || !strings.Contains(r.URL.RawQuery, "token=") {
		return ""
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil && q == nil {
		return ""
	}
	return q.Get("token")
}

// ErrNoAuth is VerifyToken's answer when the gate has no JWT key: there is
// nothing to check a token against.
var ErrNoAuth = errors.New("handshake: authentication is not configured")

// VerifyToken checks a token exactly as the handshake's authentication
// step does and returns the identity it carries (User, Expires, Topics;
// the IP fields are unset). The server uses it for a connection's refresh
// call.
func (g *Gate) VerifyToken(ctx context.Context, tok string) (Identity, error) {
	var id Identity
	if g.auth == nil {
		return id, ErrNoAuth
	}
	if tok == "" {
		return id, errNoToken
	}
	err := g.auth.verifyToken(ctx, tok, &id)
	return id, err
}

// MaxUserLen is the longest user id (a token's sub) the server takes: the
// server API names users of 1 to MaxUserLen bytes (docs/server-api.md).
const MaxUserLen = 1024

// ValidUser reports whether user can be a connection's user: 1 to
// MaxUserLen bytes of UTF-8 without control characters, so that the
// server API can name it and it can travel in an HTTP header.
func ValidUser(user string) bool {
	if user == "" || len(user) > MaxUserLen || !utf8.ValidString(user) {
		return false
	}
	for _, r := range user {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
