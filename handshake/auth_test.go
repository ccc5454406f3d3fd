package handshake

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/metrics"
)

func pemOf(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func sign(t testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAuth(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret-hmac-key-of-enough-length")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherEC, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaPEM, ecPEM := pemOf(t, &rsaKey.PublicKey), pemOf(t, &ecKey.PublicKey)
	now := time.Now()
	ok := jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}
	noneTok := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, ok)

	tests := []struct {
		name       string
		secret     []byte
		pub        []byte
		token      string
		inQuery    bool
		header     string // an Authorization header sent as is (with inQuery)
		wantUser   string // "" = 401
		wantReason string // the 401's reason, when the case checks it
	}{
		{name: "HS256 valid", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, ok), wantUser: "alice"},
		{name: "HS256 in query", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, ok), inQuery: true, wantUser: "alice"},
		{name: "HS256 in query behind Basic auth", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, ok), inQuery: true, header: "Basic dXNlcjpwYXNz", wantUser: "alice"},
		{name: "HS256 in query with a bare Authorization scheme", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, ok), inQuery: true, header: "Negotiate", wantUser: "alice"},
		{name: "bad Bearer header is not rescued by the query", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, ok), inQuery: true, header: "Bearer a.b.c"},
		{name: "HS256 without exp", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "bob"}), wantUser: "bob"},
		{name: "HS256 expired", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": now.Add(-time.Minute).Unix()})},
		{name: "HS256 nbf in future", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": now.Add(time.Hour).Unix(), "nbf": now.Add(time.Hour).Unix()})},
		{name: "HS256 wrong key", secret: secret, token: sign(t, jwt.SigningMethodHS256, []byte("another-secret-entirely-000000"), ok)},
		{name: "HS256 without sub", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"exp": now.Add(time.Hour).Unix()})},
		{name: "HS384 not accepted", secret: secret, token: sign(t, jwt.SigningMethodHS384, secret, ok)},
		{name: "sub of 1024 bytes", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": strings.Repeat("u", 1024)}), wantUser: strings.Repeat("u", 1024)},
		{name: "sub of 1025 bytes", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": strings.Repeat("u", 1025)}), wantReason: "bad_subject"},
		{name: "sub with a newline", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice\nX-Admin: 1"}), wantReason: "bad_subject"},
		{name: "sub with DEL", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice\x7f"}), wantReason: "bad_subject"},
		{name: "sub in another script", secret: secret, token: sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "zoë-日本"}), wantUser: "zoë-日本"},
		{name: "alg none", secret: secret, token: noneTok},
		{name: "alg none with public key", pub: rsaPEM, token: noneTok},
		{name: "no token", secret: secret},
		{name: "garbage token", secret: secret, token: "a.b.c"},
		{name: "RS256 valid", pub: rsaPEM, token: sign(t, jwt.SigningMethodRS256, rsaKey, ok), wantUser: "alice"},
		{name: "RS256 expired", pub: rsaPEM, token: sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "a", "exp": now.Add(-time.Minute).Unix()})},
		{name: "alg confusion: HS256 keyed with the RSA public PEM", pub: rsaPEM, token: sign(t, jwt.SigningMethodHS256, rsaPEM, ok)},
		{name: "ES256 valid", pub: ecPEM, token: sign(t, jwt.SigningMethodES256, ecKey, ok), wantUser: "alice"},
		{name: "ES256 wrong key", pub: ecPEM, token: sign(t, jwt.SigningMethodES256, otherEC, ok)},
		{name: "ES256 token against an RSA key", pub: rsaPEM, token: sign(t, jwt.SigningMethodES256, ecKey, ok)},
		{name: "HS256 and RS256 both configured: HS256", secret: secret, pub: rsaPEM, token: sign(t, jwt.SigningMethodHS256, secret, ok), wantUser: "alice"},
		{name: "HS256 and RS256 both configured: RS256", secret: secret, pub: rsaPEM, token: sign(t, jwt.SigningMethodRS256, rsaKey, ok), wantUser: "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := authed()
			cfg.JWT.HMACSecret, cfg.PublicKey = tt.secret, tt.pub
			g, m := newGate(t, cfg)
			r := upgradeReq("203.0.113.7:1")
			if tt.token != "" {
				if tt.header != "" {
					r.Header.Set("Authorization", tt.header)
				}
				if tt.inQuery {
					r.URL.RawQuery = "v=1&token=" + tt.token
				} else {
					r.Header.Set("Authorization", "Bearer "+tt.token)
				}
			}
			w := httptest.NewRecorder()
			var tk Ticket
			admitted := g.Admit(w, r, &tk)
			if tt.wantUser == "" {
				if admitted || w.Code != http.StatusUnauthorized || rejected(m, "auth") != 1 {
					t.Fatalf("admitted=%v status %d auth rejections %v; want 401", admitted, w.Code, rejected(m, "auth"))
				}
				challenge := w.Header().Get("WWW-Authenticate")
				if tt.wantReason != "" && !strings.Contains(challenge, refusals[tt.wantReason]) {
					t.Errorf("401 with WWW-Authenticate %q, want the %s refusal", challenge, tt.wantReason)
				}
				if tt.token == "" && challenge != "Bearer" ||
					tt.token != "" && !strings.HasPrefix(challenge, `Bearer error="invalid_token", error_description="token `) {
					t.Errorf("401 with WWW-Authenticate %q", challenge)
				}
			} else {
				if !admitted || tk.User != tt.wantUser {
					t.Fatalf("admitted=%v user %q (status %d); want %q", admitted, tk.User, w.Code, tt.wantUser)
				}
				tk.HandshakeDone(true)
				tk.Close()
			}
			assertIdle(t, g, m)
		})
	}
}

func TestAuthConfigErrors(t *testing.T) {
	t.Parallel()
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, pub := range map[string][]byte{
		"not PEM":       []byte("hello"),
		"private block": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}),
		"P-384 key":     pemOf(t, &p384.PublicKey),
	} {
		cfg := authed()
		cfg.PublicKey = pub
		if _, err := newAuthed(cfg, Deps{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestAuthTopicsClaim(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret-hmac-key-of-enough-length")
	exp := time.Now().Add(time.Hour).Unix()
	tests := []struct {
		name   string
		topics any // the claim's value; nil = absent
		want   *TopicClaim
		reject bool
	}{
		{name: "absent", want: nil},
		{name: "both sides", topics: map[string]any{"subscribe": []string{"chat:*", "news"}, "publish": []string{"chat:room1"}},
			want: &TopicClaim{Subscribe: []string{"chat:*", "news"}, Publish: []string{"chat:room1"}}},
		{name: "one side", topics: map[string]any{"publish": []string{"x:*"}}, want: &TopicClaim{Publish: []string{"x:*"}}},
		{name: "empty object", topics: map[string]any{}, want: &TopicClaim{}},
		{name: "array", topics: []string{"chat:*"}, reject: true},
		{name: "string", topics: "chat:*", reject: true},
		{name: "number", topics: 7, reject: true},
		{name: "side is a string", topics: map[string]any{"subscribe": "chat:*"}, reject: true},
		{name: "side holds a number", topics: map[string]any{"subscribe": []any{"a", 1}}, reject: true},
		{name: "unknown side", topics: map[string]any{"publsh": []string{"a"}}, reject: true},
		{name: "invalid glob", topics: map[string]any{"subscribe": []string{"chat:["}}, reject: true},
		{name: "empty glob", topics: map[string]any{"publish": []string{""}}, reject: true},
		{name: "too many globs", topics: map[string]any{"publish": make([]string, maxClaimGlobs+1)}, reject: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := authed()
			cfg.JWT.HMACSecret = secret
			g, m := newGate(t, cfg)
			claims := jwt.MapClaims{"sub": "alice", "exp": exp}
			if tt.topics != nil {
				claims["topics"] = tt.topics
			}
			r := upgradeReq("203.0.113.7:1")
			r.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, secret, claims))
			w := httptest.NewRecorder()
			var tk Ticket
			admitted := g.Admit(w, r, &tk)
			if tt.reject {
				if admitted || w.Code != http.StatusUnauthorized || rejected(m, "auth") != 1 {
					t.Fatalf("admitted=%v status %d; want 401", admitted, w.Code)
				}
			} else {
				if !admitted {
					t.Fatalf("refused (status %d)", w.Code)
				}
				if !reflect.DeepEqual(tk.Topics, tt.want) {
					t.Fatalf("Topics = %+v, want %+v", tk.Topics, tt.want)
				}
				tk.HandshakeDone(true)
				tk.Close()
			}
			assertIdle(t, g, m)
		})
	}
}

// A forged token's claims never reach the topics parser: a bad signature
// is refused as such, and a reused ticket forgets the previous claim.
func TestAuthTopicsClaimForgedAndReuse(t *testing.T) {
	secret := []byte("s3cret-hmac-key-of-enough-length")
	cfg := authed()
	cfg.JWT.HMACSecret = secret
	g, m := newGate(t, cfg)
	forged := sign(t, jwt.SigningMethodHS256, []byte("not-the-secret-not-the-secret-00"), jwt.MapClaims{"sub": "a", "topics": "bad"})
	var c claims
	if _, err := g.auth.parser.ParseWithClaims(forged, &c, func(tok *jwt.Token) (any, error) { return g.auth.key(context.Background(), tok) }); err == nil || errors.Is(err, errTopicsClaim) {
		t.Fatalf("forged token: err %v, want a signature error", err)
	}
	var tk Ticket
	r := upgradeReq("203.0.113.7:1")
	r.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "topics": map[string]any{"publish": []string{"x"}}}))
	if !g.Admit(httptest.NewRecorder(), r, &tk) || tk.Topics == nil {
		t.Fatal("first admit")
	}
	tk.HandshakeDone(true)
	r = upgradeReq("203.0.113.7:1")
	r.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "b"}))
	if !g.Admit(httptest.NewRecorder(), r, &tk) || tk.Topics != nil || tk.User != "b" {
		t.Fatalf("reused ticket: user %q topics %+v", tk.User, tk.Topics)
	}
	tk.HandshakeDone(true)
	tk.Close()
	assertIdle(t, g, m)
}

func TestVerifyToken(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret-hmac-key-of-enough-length")
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	cfg := authed()
	cfg.JWT.HMACSecret = secret
	g, _ := newGate(t, cfg)

	id, err := g.VerifyToken(context.Background(), sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": exp.Unix()}))
	if err != nil || id.User != "alice" || !id.Expires.Equal(exp) {
		t.Fatalf("got %+v, %v; want alice expiring %v", id, err, exp)
	}
	id, err = g.VerifyToken(context.Background(), sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "bob"}))
	if err != nil || id.User != "bob" || !id.Expires.IsZero() {
		t.Fatalf("token without exp: got %+v, %v; want bob, zero Expires", id, err)
	}
	for name, tok := range map[string]string{
		"empty":     "",
		"garbage":   "a.b.c",
		"wrong key": sign(t, jwt.SigningMethodHS256, []byte("another-secret-entirely-000000"), jwt.MapClaims{"sub": "alice"}),
		"expired":   sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}),
	} {
		if id, err := g.VerifyToken(context.Background(), tok); err == nil {
			t.Errorf("%s: accepted as %+v", name, id)
		}
	}

	// RFC 7515 4.1.11: a token whose crit header names an extension the
	// server does not understand is refused, however well it is signed.
	for name, crit := range map[string]any{"unknown extension": []string{"exp"}, "b64": []string{"b64"}, "malformed": "x", "empty": []string{}} {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": exp.Unix()})
		tok.Header["crit"] = crit
		s, err := tok.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		if id, err := g.VerifyToken(context.Background(), s); err == nil {
			t.Errorf("crit %s: accepted as %+v", name, id)
		}
	}

	// Claims are read with exact names, as every other JSON the server
	// reads: a case variant of a claim it reads, or a repeated one, is
	// refused rather than folded or overwritten.
	for name, payload := range map[string]string{
		"case variant": `{"sub":"alice","SUB":"admin"}`,
		"only variant": `{"Sub":"admin"}`,
		"repeated sub": `{"sub":"alice","sub":"admin"}`,
		"exp variant":  `{"sub":"alice","EXP":1}`,
	} {
		if id, err := g.VerifyToken(context.Background(), signRaw(t, secret, payload)); err == nil {
			t.Errorf("%s: accepted as %+v", name, id)
		}
	}
	if id, err := g.VerifyToken(context.Background(), signRaw(t, secret, `{"sub":"alice","name":"A","Name":"B"}`)); err != nil || id.User != "alice" {
		t.Errorf("claims the server does not read: %+v, %v", id, err)
	}

	anon, _ := newGate(t, DefaultConfig())
	if _, err := anon.VerifyToken(context.Background(), "x"); !errors.Is(err, ErrNoAuth) {
		t.Errorf("gate without auth: %v, want ErrNoAuth", err)
	}
}

// signRaw signs an HS256 token over payload exactly as given (MapClaims
// cannot hold a repeated key).
func signRaw(t testing.TB, secret []byte, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(unsigned, secret)
	if err != nil {
		t.Fatal(err)
	}
	return unsigned + "." + enc.EncodeToString(sig)
}

// Every refusal reason has a description that fits an RFC 6750
// error_description (printable ASCII, no '"' or '\'), and every error the
// check returns maps to a listed reason.
func TestRefusalDescriptionsFitTheChallenge(t *testing.T) {
	for _, r := range metrics.AuthRefusalReasons {
		d := refusals[r]
		if d == "" {
			t.Errorf("reason %s has no description", r)
		}
		for _, b := range []byte(d) {
			if b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
				t.Errorf("reason %s: description %q has byte %q", r, d, b)
			}
		}
	}
	if len(refusals) != len(metrics.AuthRefusalReasons) {
		t.Errorf("%d descriptions for %d reasons", len(refusals), len(metrics.AuthRefusalReasons))
	}
	for err, want := range map[error]string{errNoToken: "missing", errBigToken: "too_large", errNoSubject: "no_subject", errBadSubject: "bad_subject", errAlg: "unverifiable", errors.New("x"): "invalid"} {
		if got := RefusalOf(err).Reason; got != want {
			t.Errorf("RefusalOf(%v) = %s, want %s", err, got, want)
		}
	}
}
