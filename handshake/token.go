package handshake

import (
	"context"
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// SignHMAC returns an HS256 token for user that the handshake configured
// with j accepts: signed with j.HMACSecret, with j's audience and issuer
// when set, iat now and exp now+ttl (ttl 0: no exp; a negative ttl makes
// an expired token, for trying refusals out). It is for backends
// that mint tokens for their users, and for trying the server out; it
// cannot sign for a public key or a key set, whose private halves the
// server never sees.
func (j JWT) SignHMAC(user string, ttl time.Duration, now time.Time) (string, error) {
	if len(j.HMACSecret) == 0 {
		return "", errors.New("handshake: auth.jwt.hmacSecret is not set: only an HMAC secret can sign")
	}
	if user == "" {
		return "", errors.New("handshake: a token needs a user (its sub)")
	}
	claims := jwt.MapClaims{"sub": user, "iat": now.Unix()}
	if ttl != 0 {
		claims["exp"] = now.Add(ttl).Unix()
	}
	if j.Audience != "" {
		claims["aud"] = j.Audience
	}
	if j.Issuer != "" {
		claims["iss"] = j.Issuer
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(j.HMACSecret)
}

// Check verifies tok exactly as a handshake configured with j would
// (fetching j.JWKSURL first when set) and returns the identity it
// carries. A refused token's error gives its Refusal through RefusalOf;
// without any key configured the error is ErrNoAuth.
func (j JWT) Check(ctx context.Context, tok string) (Identity, error) {
	var id Identity
	v, err := NewVerifier(j, VerifierDeps{})
	if err != nil {
		return id, err
	}
	if v == nil {
		return id, ErrNoAuth
	}
	if tok == "" {
		return id, errNoToken
	}
	err = v.verifyToken(ctx, tok, &id)
	return id, err
}
