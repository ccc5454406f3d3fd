package handshake

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/internal/jwttest"
	"github.com/rtserver/rtserver/internal/testkit"
)

func admitsAs(t *testing.T, g *Gate, tok string) string {
	t.Helper()
	r := upgradeReq("203.0.113.7:1")
	r.Header.Set("Authorization", "Bearer "+tok)
	var tk Ticket
	if !g.Admit(httptest.NewRecorder(), r, &tk) {
		return ""
	}
	tk.HandshakeDone(true)
	tk.Close()
	return tk.User
}

func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	rsa1, _ := rsa.GenerateKey(rand.Reader, 2048)
	ec2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsa4, _ := rsa.GenerateKey(rand.Reader, 2048)
	ks := jwttest.NewKeyServer(t)
	ks.Serve(t, map[string]any{"k1": &rsa1.PublicKey})
	clock := testkit.NewClock(time.Now().Round(0))
	cfg := authed()
	cfg.JWT.JWKSURL = ks.URL
	cfg.PerTickBudget = 0
	g, _ := newGateAt(t, cfg, clock.Now)
	claims := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "alice", "exp": clock.Now().Add(time.Hour).Unix()}
	}
	hits := func(want int64, when string) {
		t.Helper()
		if got := ks.Hits(); got != want {
			t.Fatalf("%s: %d fetches of the key set, want %d", when, got, want)
		}
	}
	hits(1, "at start")

	if u := admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodRS256, rsa1, "k1", claims())); u != "alice" {
		t.Fatalf("k1 token: user %q", u)
	}
	hits(1, "known kid")

	// Rotation: the set now holds only k2. Its first token refetches.
	ks.Serve(t, map[string]any{"k2": &ec2.PublicKey})
	if u := admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodES256, ec2, "k2", claims())); u != "alice" {
		t.Fatalf("k2 token after rotation: user %q", u)
	}
	hits(2, "new kid")

	// k1 was withdrawn: gone from the cache with the refetch.
	if u := admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodRS256, rsa1, "k1", claims())); u != "" {
		t.Fatal("withdrawn k1 still verifies")
	}
	// Unknown kids within 30 s of the refetch do not fetch again.
	for range 5 {
		if admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodRS256, rsa4, "k4", claims())) != "" {
			t.Fatal("unknown kid admitted")
		}
	}
	hits(2, "unknown kids within 30 s")

	// 30 s later, the next unknown kid refetches once, and finds k4.
	ks.Serve(t, map[string]any{"k2": &ec2.PublicKey, "k4": &rsa4.PublicKey})
	clock.Advance(JWKSMinRefetch - time.Second)
	if admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodRS256, rsa4, "k4", claims())) != "" {
		t.Fatal("k4 admitted before the refetch was due")
	}
	hits(2, "29 s after")
	clock.Advance(time.Second)
	if u := admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodRS256, rsa4, "k4", claims())); u != "alice" {
		t.Fatalf("k4 after 30 s: user %q", u)
	}
	hits(3, "30 s after")

	// A kid of the wrong key type for the alg, and no kid at all: 401.
	if admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodES256, ec2, "k4", claims())) != "" {
		t.Fatal("ES256 token verified with the RSA key of k4")
	}
	if admitsAs(t, g, jwttest.Sign(t, jwt.SigningMethodES256, ec2, "", claims())) != "" {
		t.Fatal("token without kid admitted")
	}
	hits(3, "mismatches")
}

// Many tokens with the same new kid at once cost one fetch.
func TestJWKSConcurrentUnknownKID(t *testing.T) {
	t.Parallel()
	old, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fresh, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ks := jwttest.NewKeyServer(t)
	ks.Serve(t, map[string]any{"old": &old.PublicKey})
	cfg := authed()
	cfg.JWT.JWKSURL = ks.URL
	cfg.PerTickBudget = 0
	g, _ := newGate(t, cfg)
	ks.Serve(t, map[string]any{"old": &old.PublicKey, "new": &fresh.PublicKey})
	tok := jwttest.Sign(t, jwt.SigningMethodES256, fresh, "new", jwt.MapClaims{"sub": "bob"})
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 16 {
		wg.Go(func() {
			if admitsAs(t, g, tok) == "bob" {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 16 || ks.Hits() != 2 {
		t.Fatalf("admitted %d of 16 with %d fetches; want 16 with 2 (start + one refetch)", admitted.Load(), ks.Hits())
	}
}

func TestJWKSStartErrors(t *testing.T) {
	t.Parallel()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, body := range map[string]string{
		"server error":   "",
		"not JSON":       "hello",
		"no keys":        `{"keys":[]}`,
		"only symmetric": `{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}`,
	} {
		ks := jwttest.NewKeyServer(t)
		if body != "" {
			ks.ServeRaw([]byte(body))
		}
		cfg := authed()
		cfg.JWT.JWKSURL = ks.URL
		if _, err := newAuthed(cfg, Deps{}); err == nil {
			t.Errorf("%s: New accepted the key set", name)
		}
	}
	// Keys without a kid, for encryption, or on another curve are skipped.
	ks := jwttest.NewKeyServer(t)
	ks.Serve(t, map[string]any{"": &ec.PublicKey, "p384": &p384.PublicKey})
	cfg := authed()
	cfg.JWT.JWKSURL = ks.URL
	if _, err := newAuthed(cfg, Deps{}); err == nil {
		t.Error("a set with no usable key was accepted")
	}
	cfg.JWT.JWKSURL = "http://127.0.0.1:1/unreachable"
	if _, err := newAuthed(cfg, Deps{}); err == nil {
		t.Error("unreachable key set accepted")
	}
}

func TestAudienceIssuer(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret-hmac-key-of-enough-length")
	cfg := authed()
	cfg.JWT.HMACSecret = secret
	cfg.JWT.Audience = "rt"
	cfg.JWT.Issuer = "https://idp.example"
	cfg.PerTickBudget = 0
	g, _ := newGate(t, cfg)
	tests := []struct {
		name   string
		claims jwt.MapClaims
		want   string
	}{
		{"both match", jwt.MapClaims{"sub": "a", "aud": "rt", "iss": "https://idp.example"}, "a"},
		{"aud in a list", jwt.MapClaims{"sub": "a", "aud": []string{"other", "rt"}, "iss": "https://idp.example"}, "a"},
		{"wrong aud", jwt.MapClaims{"sub": "a", "aud": "other", "iss": "https://idp.example"}, ""},
		{"no aud", jwt.MapClaims{"sub": "a", "iss": "https://idp.example"}, ""},
		{"wrong iss", jwt.MapClaims{"sub": "a", "aud": "rt", "iss": "https://evil.example"}, ""},
		{"no iss", jwt.MapClaims{"sub": "a", "aud": "rt"}, ""},
	}
	for _, tt := range tests {
		if got := admitsAs(t, g, sign(t, jwt.SigningMethodHS256, secret, tt.claims)); got != tt.want {
			t.Errorf("%s: admitted as %q, want %q", tt.name, got, tt.want)
		}
	}
	anon := authed()
	anon.JWT.Audience = "rt"
	if _, err := newAuthed(anon, Deps{}); err == nil {
		t.Error("audience without a key accepted")
	}
}

// The key set comes from a configured URL, but it is still bytes from the
// network: parsing never panics, and what it keeps is usable.
func FuzzParseJWKS(f *testing.F) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var set jwkset.JWKSMarshal
	for kid, pub := range map[string]any{"r": &rsaKey.PublicKey, "e": &ecKey.PublicKey} {
		j, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid}})
		if err != nil {
			f.Fatal(err)
		}
		set.Keys = append(set.Keys, j.Marshal())
	}
	good, _ := json.Marshal(set)
	f.Add(good)
	f.Add([]byte(`{"keys":[]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"x","n":"","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","kid":"x","crv":"P-256","x":"AA","y":"AA"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseJWKS(body)
		if err != nil {
			return
		}
		if len(keys) == 0 {
			t.Fatal("no error and no key")
		}
		for kid, k := range keys {
			if kid == "" {
				t.Fatal("a key without kid kept")
			}
			switch key := k.key.(type) {
			case *rsa.PublicKey:
				if key.N == nil {
					t.Fatalf("kid %q: RSA key without modulus", kid)
				}
			case *ecdsa.PublicKey:
				if key.Curve != elliptic.P256() {
					t.Fatalf("kid %q: EC key on %s", kid, key.Curve.Params().Name)
				}
			default:
				t.Fatalf("kid %q: kept a %T", kid, k.key)
			}
		}
	})
}

// A set older than JWKSMaxAge is fetched again by the next token, so a
// withdrawn key stops verifying even when no unknown kid ever arrives.
func TestJWKSMaxAge(t *testing.T) {
	t.Parallel()
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ks := jwttest.NewKeyServer(t)
	ks.Serve(t, map[string]any{"k1": &k1.PublicKey, "k2": &k2.PublicKey})
	clock := testkit.NewClock(time.Now().Round(0))
	cfg := authed()
	cfg.JWT.JWKSURL = ks.URL
	cfg.PerTickBudget = 0
	g, _ := newGateAt(t, cfg, clock.Now)
	tok := func(key *ecdsa.PrivateKey, kid string) string {
		return jwttest.Sign(t, jwt.SigningMethodES256, key, kid, jwt.MapClaims{"sub": "a", "exp": clock.Now().Add(time.Hour).Unix()})
	}
	ks.Serve(t, map[string]any{"k2": &k2.PublicKey}) // k1 withdrawn
	clock.Advance(JWKSMaxAge - time.Second)
	if admitsAs(t, g, tok(k1, "k1")) != "a" || ks.Hits() != 1 {
		t.Fatalf("before the max age: k1 refused or the set fetched (%d fetches)", ks.Hits())
	}
	clock.Advance(time.Second)
	if admitsAs(t, g, tok(k1, "k1")) != "" {
		t.Fatal("withdrawn k1 still verifies after the max age")
	}
	if ks.Hits() != 2 {
		t.Fatalf("%d fetches, want 2 (start, one aged refetch)", ks.Hits())
	}
	if admitsAs(t, g, tok(k2, "k2")) != "a" || admitsAs(t, g, tok(k1, "k1")) != "" || ks.Hits() != 2 {
		t.Fatalf("after the refetch: want k2 admitted, k1 refused, no fetch (%d fetches)", ks.Hits())
	}
	// A failing key server is asked at most once per JWKSMinRefetch.
	ks.ServeRaw(nil)
	clock.Advance(JWKSMaxAge)
	for range 3 {
		if admitsAs(t, g, tok(k2, "k2")) != "a" {
			t.Fatal("cached k2 refused while the key server is down")
		}
	}
	if ks.Hits() != 3 {
		t.Fatalf("%d fetches, want 3 (one failed aged refetch)", ks.Hits())
	}
}
