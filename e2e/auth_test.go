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
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
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

// expirySecret is the HS256 secret of the servers whose tokens expire
// within seconds; hsToken signs with it.
const expirySecret = "e2e-secret-of-a-decent-length-000"

func hsToken(t testing.TB, sub string, exp time.Time) string {
	t.Helper()
	c := jwt.MapClaims{"sub": sub}
	if !exp.IsZero() {
		c["exp"] = exp.Unix()
	}
	return jwttest.Sign(t, jwt.SigningMethodHS256, []byte(expirySecret), "", c)
}

// awaitNotice reads until the tokenExpiring notice and returns what it
// says is left; frames before it are skipped, a close first fails the
// test.
func awaitNotice(t testing.TB, c *wstest.Conn) time.Duration {
	t.Helper()
	for {
		f := c.Recv()
		if f.Method == "system" && f.Params.Event == "tokenExpiring" {
			return time.Duration(f.Params.ExpiresInMs) * time.Millisecond
		}
	}
}

// A short-lived token binds its connection: the client is told before exp,
// a refresh with a token of the same user moves exp (and a new notice
// comes before the new exp), and a connection left unrefreshed is closed
// with 1008 "token expired". Refresh refuses another user's token and an
// invalid one with -32003, and the connection stays.
func TestTokenExpiryRefreshThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, fmt.Sprintf("auth: {jwt: {hmacSecret: %q, refreshNotice: 2s}}\nhandshake: {perTickBudget: 0}\n", expirySecret))
	dial := func(tok string) *wstest.Conn {
		ws, status := dialToken(t, p.WS(), tok)
		if ws == nil {
			t.Fatalf("dial: status %d", status)
		}
		return &wstest.Conn{T: t, WS: ws}
	}
	exp := time.Unix(time.Now().Add(4*time.Second).Unix(), 0) // whole seconds, as in a token
	alice := dial(hsToken(t, "alice", exp))                   // refreshed once, then left to expire
	bob := dial(hsToken(t, "bob", exp))                       // never refreshed
	carol := dial(hsToken(t, "carol", time.Time{}))           // no exp at all

	for _, tok := range []string{
		hsToken(t, "mallory", time.Now().Add(time.Hour)),
		jwttest.Sign(t, jwt.SigningMethodHS256, []byte("not-the-secret-at-all-0000000000"), "", jwt.MapClaims{"sub": "bob"}),
		hsToken(t, "bob", time.Now().Add(-time.Minute)),
	} {
		f := bob.Call("refresh", fmt.Sprintf(`{"token":%q}`, tok))
		if f.Error == nil || f.Error.Code != protocol.CodeForbidden {
			t.Fatalf("refresh with a bad token: %s %+v, want -32003", f.Result, f.Error)
		}
	}
	if f := bob.Call("refresh", `{}`); f.Error == nil || f.Error.Code != protocol.CodeInvalidParams {
		t.Fatalf("refresh without a token: %+v, want -32602", f.Error)
	}
	if f := carol.Call("refresh", fmt.Sprintf(`{"token":%q}`, hsToken(t, "carol", time.Time{}))); f.Error != nil || string(f.Result) != `{"expiresAt":null}` {
		t.Fatalf("refresh without exp: %s %+v", f.Result, f.Error)
	}

	if left := awaitNotice(t, alice); left <= 0 || left > time.Until(exp)+time.Second {
		t.Fatalf("notice says %v left of a token expiring in %v", left, time.Until(exp))
	}
	newExp := exp.Add(4 * time.Second) // its notice comes 2 s after bob is closed
	if f := alice.Call("refresh", fmt.Sprintf(`{"token":%q}`, hsToken(t, "alice", newExp))); f.Error != nil || string(f.Result) != fmt.Sprintf(`{"expiresAt":%d}`, newExp.Unix()) {
		t.Fatalf("refresh: %s %+v", f.Result, f.Error)
	}

	// Bob's token expires (the old exp of alice's too): closed with 1008.
	if left := awaitNotice(t, bob); left <= 0 {
		t.Fatalf("bob's notice says %v left", left)
	}
	if code, reason := bob.CloseStatus(); code != websocket.StatusPolicyViolation || reason != "token expired" {
		t.Fatalf("bob closed %d %q, want 1008 token expired", code, reason)
	}
	// Alice outlives her first token's exp, is told again before the new
	// one, and is closed at it.
	wstest.MustOK(t, alice.Call("subscribe", `{"topic":"still-here"}`))
	awaitNotice(t, alice)
	if code, reason := alice.CloseStatus(); code != websocket.StatusPolicyViolation || reason != "token expired" {
		t.Fatalf("alice closed %d %q, want 1008 token expired", code, reason)
	}
	// Carol, without exp, is still there.
	wstest.MustOK(t, carol.Call("subscribe", `{"topic":"still-here"}`))
}
