package handshake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rtserver/rtserver/metrics"
)

// A token SignHMAC makes passes Check (and so the handshake) with the same
// JWT config; Check names the failed check of one that does not.
func TestSignHMACPassesCheckAndCheckNamesFailures(t *testing.T) {
	ctx := context.Background()
	j := JWT{HMACSecret: []byte("a-secret-of-at-least-32-bytes-long!"), Audience: "rt", Issuer: "idp"}
	tok, err := j.SignHMAC("alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := j.Check(ctx, tok)
	if err != nil || id.User != "alice" || id.Expires.IsZero() {
		t.Fatalf("Check: %+v, %v", id, err)
	}
	old, _ := j.SignHMAC("alice", time.Minute, time.Now().Add(-time.Hour))
	if _, err := j.Check(ctx, old); RefusalOf(err).Reason != metrics.AuthExpired {
		t.Fatalf("expired token: %v (%s)", err, RefusalOf(err).Reason)
	}
	other := j
	other.Audience = "elsewhere"
	if _, err := other.Check(ctx, tok); RefusalOf(err).Reason != metrics.AuthAudience {
		t.Fatalf("wrong audience: %v", err)
	}
	other = j
	other.HMACSecret = []byte("another-secret-of-32-bytes-or-more!")
	if _, err := other.Check(ctx, tok); RefusalOf(err).Reason != metrics.AuthSignature {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := (JWT{}).Check(ctx, tok); !errors.Is(err, ErrNoAuth) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := (JWT{}).SignHMAC("alice", 0, time.Now()); err == nil {
		t.Fatal("signed without a secret")
	}
}
