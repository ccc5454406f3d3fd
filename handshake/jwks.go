package handshake

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
)

// JWKSMinRefetch is the least time between two fetches of the JWKS that
// unknown key ids cause: a stream of tokens with made-up kids costs the
// key server one request per 30 s, not one per token.
const JWKSMinRefetch = 30 * time.Second

// JWKSMaxAge is how old the cached set may grow while tokens keep arriving
// with known kids: the first token after that fetches it again (one
// caller, synchronously; the others go on with the cache), so a key the
// issuer withdrew stops verifying within about this long.
const JWKSMaxAge = time.Hour

const (
	// jwksMaxBytes bounds a JWKS document (real ones are a few KiB).
	jwksMaxBytes = 1 << 20
	// jwksTimeout bounds one fetch when the caller's client has none.
	jwksTimeout = 10 * time.Second
)

var (
	errNoKID       = errors.New("token has no kid header")
	errUnknownKID  = errors.New("unknown kid")
	errKeyMismatch = errors.New("the key of this kid is not for this alg")
)

// jwksKey is one usable key of the set.
type jwksKey struct {
	alg string // the JWK's "alg" when it names one; "" = any alg of the key's type
	key any    // *rsa.PublicKey or P-256 *ecdsa.PublicKey
}

// jwks is a JSON Web Key Set fetched from a URL: fetched when made,
// cached, and fetched again when a token names a kid the cache does not
// hold, or the set is older than JWKSMaxAge, at most once per
// JWKSMinRefetch. The refetch replaces the whole set, so a key the issuer
// withdrew stops verifying once a refetch has happened.
//
// The cache is written here rather than taken from
// github.com/MicahParks/keyfunc: its unknown-kid limiter (a
// golang.org/x/time/rate.Limiter passed to jwkset's HTTP client) waits
// for a token instead of refusing at once, so an upgrade could sit on a
// sleep; its wait bound is also the fetch timeout; concurrent tokens with
// the same new kid are not folded into one fetch; the response body is
// read without a bound; and its clock cannot be injected. jwkset still
// parses and validates the keys.
type jwks struct {
	url    string
	client *http.Client
	now    func() time.Time
	log    *slog.Logger

	keys atomic.Pointer[map[string]jwksKey] // read without a lock on every token

	// sem (capacity 1) serialises refetches: callers with an unknown kid
	// wait for the fetch under way (or their context) and then look again,
	// so one new key costs one request however many tokens carry it.
	sem       chan struct{}
	lastFetch time.Time // of the last refetch attempt; guarded by sem

	fetchedAt atomic.Int64 // unix nanoseconds of the last successful fetch
}

// newJWKS fetches the set once; an error (unreachable URL, bad document,
// no usable key) stops start-up, naming the URL.
func newJWKS(url string, client *http.Client, now func() time.Time, log *slog.Logger) (*jwks, error) {
	if client == nil {
		client = &http.Client{Timeout: jwksTimeout}
	}
	k := &jwks{url: url, client: client, now: now, log: log, sem: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), jwksTimeout)
	defer cancel()
	if err := k.fetch(ctx); err != nil {
		return nil, fmt.Errorf("handshake: auth.jwt.jwksUrl: %w", err)
	}
	return k, nil
}

// key returns the public key for a token's kid and alg (RS256 or ES256).
func (k *jwks) key(ctx context.Context, kid, alg string) (any, error) {
	if kid == "" {
		return nil, errNoKID
	}
	if key, ok := (*k.keys.Load())[kid]; ok {
		if k.now().UnixNano()-k.fetchedAt.Load() < int64(JWKSMaxAge) || !k.refreshStale(ctx) {
			return key.forAlg(alg)
		}
		if key, ok := (*k.keys.Load())[kid]; ok {
			return key.forAlg(alg)
		}
		return nil, fmt.Errorf("%w %q (withdrawn from the key set)", errUnknownKID, kid)
	}
	select {
	case k.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-k.sem }()
	// A fetch that finished while we waited may have brought the key.
	if key, ok := (*k.keys.Load())[kid]; ok {
		return key.forAlg(alg)
	}
	now := k.now()
	if !k.lastFetch.IsZero() && now.Sub(k.lastFetch) < JWKSMinRefetch {
		return nil, fmt.Errorf("%w %q (the key set was fetched less than %v ago)", errUnknownKID, kid, JWKSMinRefetch)
	}
	// A failed fetch counts too: a key server that is down is not asked
	// again for every token.
	k.lastFetch = now
	if err := k.fetch(ctx); err != nil {
		k.log.Warn("auth.jwt.jwksUrl: refetch for an unknown kid failed; keeping the cached keys", "kid", kid, "err", err)
		return nil, fmt.Errorf("%w %q: refetch: %w", errUnknownKID, kid, err)
	}
	k.log.Info("auth.jwt.jwksUrl: key set refetched for an unknown kid", "kid", kid, "keys", len(*k.keys.Load()))
	if key, ok := (*k.keys.Load())[kid]; ok {
		return key.forAlg(alg)
	}
	return nil, fmt.Errorf("%w %q", errUnknownKID, kid)
}

// refreshStale fetches a set older than JWKSMaxAge again, unless another
// caller is fetching (it does not wait) or the last attempt was less than
// JWKSMinRefetch ago. It reports whether the set was replaced.
func (k *jwks) refreshStale(ctx context.Context) bool {
	select {
	case k.sem <- struct{}{}:
	default:
		return false
	}
	defer func() { <-k.sem }()
	now := k.now()
	if now.UnixNano()-k.fetchedAt.Load() < int64(JWKSMaxAge) || now.Sub(k.lastFetch) < JWKSMinRefetch {
		return false
	}
	k.lastFetch = now
	if err := k.fetch(ctx); err != nil {
		k.log.Warn("auth.jwt.jwksUrl: refetch of the aged key set failed; keeping the cached keys", "err", err)
		return false
	}
	k.log.Info("auth.jwt.jwksUrl: aged key set refetched", "keys", len(*k.keys.Load()))
	return true
}

func (key jwksKey) forAlg(alg string) (any, error) {
	if key.alg != "" && key.alg != alg {
		return nil, errKeyMismatch
	}
	switch key.key.(type) {
	case *rsa.PublicKey:
		if alg == "RS256" {
			return key.key, nil
		}
	case *ecdsa.PublicKey:
		if alg == "ES256" {
			return key.key, nil
		}
	}
	return nil, errKeyMismatch
}

// fetch gets the set and replaces the cache with its usable keys. On an
// error the cache is kept as it was.
func (k *jwks) fetch(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", k.url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", k.url, err)
	}
	if len(body) > jwksMaxBytes {
		return fmt.Errorf("GET %s: key set larger than %d bytes", k.url, jwksMaxBytes)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", k.url, err)
	}
	k.keys.Store(&keys)
	k.fetchedAt.Store(k.now().UnixNano())
	return nil
}

// parseJWKS keeps the set's signature keys that RS256 or ES256 can use
// and that carry a kid; it skips the rest (encryption keys, symmetric
// keys, other curves) and fails only when nothing usable is left.
func parseJWKS(body []byte) (map[string]jwksKey, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("not a JWK set: %w", err)
	}
	keys := map[string]jwksKey{}
	for _, m := range set.Keys {
		if m.KID == "" || (m.USE != "" && m.USE != jwkset.UseSig) {
			continue
		}
		alg := m.ALG.String()
		if alg != "" && alg != "RS256" && alg != "ES256" {
			continue
		}
		j, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			continue
		}
		var pub any
		switch key := j.Key().(type) {
		case *rsa.PublicKey:
			pub = key
		case *rsa.PrivateKey:
			pub = &key.PublicKey
		case *ecdsa.PublicKey:
			pub = key
		case *ecdsa.PrivateKey:
			pub = &key.PublicKey
		}
		if ec, ok := pub.(*ecdsa.PublicKey); ok && ec.Curve != elliptic.P256() {
			pub = nil
		}
		if pub == nil {
			continue
		}
		keys[m.KID] = jwksKey{alg: alg, key: pub}
	}
	if len(keys) == 0 {
		return nil, errors.New("no RS256 or ES256 signing key with a kid in the set")
	}
	return keys, nil
}
