package handshake

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/metrics"
)

// A token without exp never expires. With auth.jwt.requireExp such a
// token (and one with "exp": null) is refused, reason lifetime; with
// maxLifetime, so is one whose exp is further ahead than it.
func TestRequireExpAndMaxLifetime(t *testing.T) {
	secret := []byte("s3cret-hmac-key-of-enough-length")
	now := time.Unix(1_800_000_000, 0)
	gate := func(requireExp bool, maxLife time.Duration) *Gate {
		cfg := authed()
		cfg.JWT.HMACSecret = secret
		cfg.JWT.RequireExp, cfg.JWT.MaxLifetime = requireExp, maxLife
		g, err := newAuthed(cfg, Deps{now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	tok := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, secret, c) }
	noExp := tok(jwt.MapClaims{"sub": "a"})
	nullExp := tok(jwt.MapClaims{"sub": "a", "exp": nil})
	hour := tok(jwt.MapClaims{"sub": "a", "exp": now.Add(time.Hour).Unix()})
	year := tok(jwt.MapClaims{"sub": "a", "exp": now.Add(365 * 24 * time.Hour).Unix()})
	for _, c := range []struct {
		name       string
		requireExp bool
		maxLife    time.Duration
		tok        string
		want       string // "" accepted, else the refusal reason
	}{
		{"no exp, off", false, 0, noExp, ""},
		{"no exp, required", true, 0, noExp, metrics.AuthLifetime},
		{"exp null, required", true, 0, nullExp, metrics.AuthLifetime},
		{"an hour, required", true, 0, hour, ""},
		{"a year, required", true, 0, year, ""},
		{"a year, max a day", true, 24 * time.Hour, year, metrics.AuthLifetime},
		{"an hour, max a day", true, 24 * time.Hour, hour, ""},
		{"no exp, max a day (requires exp)", false, 24 * time.Hour, noExp, metrics.AuthLifetime},
	} {
		_, err := gate(c.requireExp, c.maxLife).VerifyToken(context.Background(), c.tok)
		got := ""
		if err != nil {
			got = RefusalOf(err).Reason
		}
		if got != c.want {
			t.Errorf("%s: refused %q (%v), want %q", c.name, got, err, c.want)
		}
	}
}

// Start-up warns while a token without exp is accepted, and only then.
func TestNoExpWarnsAtStartUp(t *testing.T) {
	for _, c := range []struct {
		requireExp bool
		maxLife    time.Duration
		warn       bool
	}{{false, 0, true}, {true, 0, false}, {false, time.Hour, false}} {
		var buf bytes.Buffer
		cfg := authed()
		cfg.JWT.HMACSecret = []byte("s3cret-hmac-key-of-enough-length")
		cfg.JWT.RequireExp, cfg.JWT.MaxLifetime = c.requireExp, c.maxLife
		if _, err := newAuthed(cfg, Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil))}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(buf.String(), "requireExp is off"); got != c.warn {
			t.Errorf("requireExp %v, maxLifetime %s: warned %v, want %v: %s", c.requireExp, c.maxLife, got, c.warn, buf.String())
		}
	}
	// Anonymous connections: no token, nothing to warn about.
	var buf bytes.Buffer
	if _, err := New(DefaultConfig(), Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil))}); err != nil || buf.Len() != 0 {
		t.Errorf("anonymous gate: %v, logged %q", err, buf.String())
	}
	if err := (JWT{MaxLifetime: -time.Second}).Validate(); err == nil {
		t.Error("a negative maxLifetime accepted")
	}
}
