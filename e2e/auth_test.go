package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/internal/jwttest"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

// dialToken dials with "Authorization: Bearer tok" and returns the
// connection, or nil and the HTTP status of the refused upgrade.
func dialToken(t testing.TB, url, tok string) (*websocket.Conn, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws, http.StatusSwitchingProtocols
}

// The binary verifies tokens with keys from a JWKS URL: fetched at start,
// a rotated-in kid picked up by one refetch, a withdrawn kid refused, and
// a run of unknown kids costing no further request within 30 s. audience
// and issuer are enforced.
func TestJWKSRotationThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	rsa1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ec2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ks := jwttest.NewKeyServer(t)
	ks.Serve(t, map[string]any{"k1": &rsa1.PublicKey})
	p := start(t, fmt.Sprintf("auth: {jwt: {jwksUrl: %q, audience: rt, issuer: idp}}\nhandshake: {perTickBudget: 0}\n", ks.URL))
	if ks.Hits() != 1 {
		t.Fatalf("%d fetches at start, want 1", ks.Hits())
	}
	claims := func(c jwt.MapClaims) jwt.MapClaims {
		out := jwt.MapClaims{"sub": "alice", "aud": "rt", "iss": "idp", "exp": time.Now().Add(time.Hour).Unix()}
		for k, v := range c {
			out[k] = v
		}
		return out
	}
	expect := func(what, tok string, want int) {
		t.Helper()
		if _, got := dialToken(t, p.WS(), tok); got != want {
			t.Fatalf("%s: status %d, want %d", what, got, want)
		}
	}

	expect("k1", jwttest.Sign(t, jwt.SigningMethodRS256, rsa1, "k1", claims(nil)), http.StatusSwitchingProtocols)
	expect("wrong audience", jwttest.Sign(t, jwt.SigningMethodRS256, rsa1, "k1", claims(jwt.MapClaims{"aud": "other"})), http.StatusUnauthorized)
	expect("wrong issuer", jwttest.Sign(t, jwt.SigningMethodRS256, rsa1, "k1", claims(jwt.MapClaims{"iss": "evil"})), http.StatusUnauthorized)
	if ks.Hits() != 1 {
		t.Fatalf("%d fetches after known kids, want 1", ks.Hits())
	}

	// Rotation: k1 out, k2 in.
	ks.Serve(t, map[string]any{"k2": &ec2.PublicKey})
	expect("rotated-in k2", jwttest.Sign(t, jwt.SigningMethodES256, ec2, "k2", claims(nil)), http.StatusSwitchingProtocols)
	if ks.Hits() != 2 {
		t.Fatalf("%d fetches after a new kid, want 2", ks.Hits())
	}
	expect("withdrawn k1", jwttest.Sign(t, jwt.SigningMethodRS256, rsa1, "k1", claims(nil)), http.StatusUnauthorized)
	for i := range 5 {
		expect("unknown kid", jwttest.Sign(t, jwt.SigningMethodES256, stranger, fmt.Sprintf("x%d", i), claims(nil)), http.StatusUnauthorized)
	}
	if ks.Hits() != 2 {
		t.Fatalf("%d fetches after unknown kids within 30 s of the last refetch, want still 2", ks.Hits())
	}
	if v := p.metric(`handshake_rejected_total{reason="auth"}`); v != 8 {
		t.Fatalf("handshake_rejected_total{auth} = %v, want 8", v)
	}
}

// A key server that cannot be reached stops start-up with a message
// naming the key.
func TestJWKSUnreachableStopsStartup(t *testing.T) {
	ks := jwttest.NewKeyServer(t) // answers 500
	p := startNoWait(t, fmt.Sprintf("auth: {jwt: {jwksUrl: %q}}\n", ks.URL))
	if code := p.exitCode(30 * time.Second); code == 0 {
		t.Fatal("rtserver started without its key set")
	}
	if log := p.log.String(); !strings.Contains(log, "auth.jwt.jwksUrl") || !strings.Contains(log, "500") {
		t.Fatalf("start-up error does not name the key and the cause:\n%s", p.log.String())
	}
}
