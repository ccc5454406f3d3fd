package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/internal/jwttest"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

const refusalSecret = "refusal-test-secret-0123456789abcdef"

// Each refused token says why: the RFC 6750 challenge names the failed
// check (a missing token gets the bare scheme), the reason is counted in
// handshake_auth_refused_total and logged at debug level, and nothing of
// the key reaches the client.
func TestRefusedTokensSayWhy(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `auth: {jwt: {hmacSecret: "`+refusalSecret+`", audience: rt, issuer: idp}}
handshake: {perTickBudget: 0}
`)
	// Every reason exists at zero before the first refusal.
	m := p.metrics()
	for _, r := range []string{"missing", "expired", "audience", "issuer", "signature"} {
		if v, ok := m[`handshake_auth_refused_total{reason="`+r+`"}`]; !ok || v != 0 {
			t.Fatalf("reason %s at start: %v (present %v), want 0", r, v, ok)
		}
	}
	claims := func(c jwt.MapClaims) jwt.MapClaims {
		out := jwt.MapClaims{"sub": "alice", "aud": "rt", "iss": "idp", "exp": time.Now().Add(time.Hour).Unix()}
		for k, v := range c {
			out[k] = v
		}
		return out
	}
	sign := func(key string, c jwt.MapClaims) string {
		return jwttest.Sign(t, jwt.SigningMethodHS256, []byte(key), "", claims(c))
	}
	cases := []struct {
		reason, token, challenge string
	}{
		{"missing", "", `Bearer`},
		{"expired", sign(refusalSecret, jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()}), `error="invalid_token", error_description="token expired`},
		{"audience", sign(refusalSecret, jwt.MapClaims{"aud": "other"}), `error_description="token aud does not include auth.jwt.audience"`},
		{"issuer", sign(refusalSecret, jwt.MapClaims{"iss": "evil"}), `error_description="token iss is not auth.jwt.issuer"`},
		{"signature", sign("another-secret-of-32-bytes-or-more!!", nil), `error_description="token signature does not verify`},
		{"malformed", "not.a.jwt", `error_description="token is not a well-formed JWT"`},
	}
	for _, c := range cases {
		hdr := http.Header{}
		if c.token != "" {
			hdr.Set("Authorization", "Bearer "+c.token)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, resp, err := websocket.Dial(ctx, p.WS(), &websocket.DialOptions{HTTPHeader: hdr})
		cancel()
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: dial err %v, resp %v, want 401", c.reason, err, resp)
		}
		got := resp.Header.Get("WWW-Authenticate")
		if c.reason == "missing" && got != "Bearer" || !strings.Contains(got, c.challenge) {
			t.Fatalf("%s: WWW-Authenticate %q, want %q", c.reason, got, c.challenge)
		}
		if strings.Contains(got, refusalSecret) {
			t.Fatalf("%s: the challenge leaks the secret: %q", c.reason, got)
		}
		if v := p.metric(`handshake_auth_refused_total{reason="` + c.reason + `"}`); v != 1 {
			t.Fatalf("%s: counted %v, want 1", c.reason, v)
		}
		testkit.Eventually(t, 10*time.Second, "debug log of "+c.reason, func() bool {
			return strings.Contains(p.log.String(), "token refused: "+c.reason)
		})
	}
	if v := p.metric(`handshake_rejected_total{reason="auth"}`); v != float64(len(cases)) {
		t.Fatalf("handshake_rejected_total{auth} %v, want %d", v, len(cases))
	}
}

// A -32003 is logged at debug level with the namespace that decided and
// the grants it tried, and counted by that namespace (each configured
// pattern, the default rule and reserved topics start at zero).
func TestDeniedCallsNameTheirNamespace(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `handshake: {perTickBudget: 0}
topics:
  namespaces:
    - {pattern: "news:*", subscribe: [any], publish: []}
  default: {subscribe: [authenticated], publish: [authenticated]}
`)
	for _, ns := range []string{"news:*", "(default)", "(reserved)"} {
		if v, ok := p.metrics()[`topic_denied_namespace_total{namespace="`+ns+`"}`]; !ok || v != 0 {
			t.Fatalf("namespace %s at start: %v (present %v), want 0", ns, v, ok)
		}
	}
	c := wstest.Dial(t, p.WS())
	for _, call := range []struct{ method, topic, ns string }{
		{"publish", "news:today", "news:*"},
		{"subscribe", "room:1", "(default)"},
	} {
		params := `{"topic":"` + call.topic + `"}`
		if call.method == "publish" {
			params = `{"topic":"` + call.topic + `","data":1}`
		}
		f := c.Call(call.method, params)
		if f.Error == nil || f.Error.Code != -32003 {
			t.Fatalf("%s %s: %+v, want -32003", call.method, call.topic, f)
		}
		if v := p.metric(`topic_denied_namespace_total{namespace="` + call.ns + `"}`); v != 1 {
			t.Fatalf("%s %s: namespace %s counted %v, want 1", call.method, call.topic, call.ns, v)
		}
	}
	// Each kind of refusal has its own line: the log's rate limit does not
	// fold the default's refusal into the namespace's.
	testkit.Eventually(t, 10*time.Second, "debug log naming news:* and (default)", func() bool {
		l := p.log.String()
		return strings.Contains(l, "topic call refused") && strings.Contains(l, `namespace=news:*`) && strings.Contains(l, "topic=news:today") &&
			strings.Contains(l, `namespace=(default)`) && strings.Contains(l, "topic=room:1")
	})
}

// An oversize message closes with 1009 and a reason that names the limit
// by its config key and value.
func TestOversizeCloseReasonNamesTheLimit(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "limits: {maxMessageBytes: 1024}\n")
	// A message of exactly the limit is read and answered.
	exact := wstest.Dial(t, p.WS())
	prefix := `{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":"`
	frame := prefix + strings.Repeat("x", 1024-len(prefix)-3) + `"}}`
	exact.Send(frame)
	if f := exact.Recv(); string(f.ID) != "1" || f.Error != nil {
		t.Fatalf("a %d-byte message: %+v", len(frame), f)
	}
	big := wstest.Dial(t, p.WS())
	big.Send(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":"` + strings.Repeat("x", 1025) + `"}}`)
	code, reason := big.CloseStatus()
	if code != websocket.StatusMessageTooBig || reason != "message larger than limits.maxMessageBytes (1024)" {
		t.Fatalf("close %d %q", code, reason)
	}
}

// A short HMAC secret starts, with a warning that says why it matters; a
// 32-byte one starts without it.
func TestShortHMACSecretWarnsAtStart(t *testing.T) {
	leakcheck.Check(t)
	const warning = "auth.jwt.hmacSecret is shorter than 32 bytes"
	short := start(t, "auth: {jwt: {hmacSecret: too-short}}\n")
	testkit.Eventually(t, 10*time.Second, "the short-secret warning", func() bool {
		return strings.Contains(short.log.String(), warning) && strings.Contains(short.log.String(), "bytes=9")
	})
	long := start(t, `auth: {jwt: {hmacSecret: "`+refusalSecret+`"}}`+"\n")
	testkit.Eventually(t, 10*time.Second, "listening", func() bool {
		return strings.Contains(long.log.String(), "rtserver listening")
	})
	if strings.Contains(long.log.String(), warning) {
		t.Fatalf("a %d-byte secret warned:\n%s", len(refusalSecret), long.log.String())
	}
}
