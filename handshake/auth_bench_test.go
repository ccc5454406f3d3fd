package handshake

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/internal/jwttest"
)

// BenchmarkVerifyToken is the cost of the authentication step (and of a
// refresh call) per key source. The JWKS case is a cached kid: no request.
func BenchmarkVerifyToken(b *testing.B) {
	secret := []byte("s3cret-hmac-key-of-enough-length")
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	claims := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "aud": "rt"}
	ks := jwttest.NewKeyServer(b)
	ks.Serve(b, map[string]any{"r": &rsaKey.PublicKey, "e": &ecKey.PublicKey})
	for _, bc := range []struct {
		name string
		cfg  func(*authConfig)
		tok  string
	}{
		{"HS256", func(c *authConfig) { c.JWT.HMACSecret = secret }, jwttest.Sign(b, jwt.SigningMethodHS256, secret, "", claims)},
		{"RS256-file", func(c *authConfig) { c.PublicKey = pemOf(b, &rsaKey.PublicKey) }, jwttest.Sign(b, jwt.SigningMethodRS256, rsaKey, "", claims)},
		{"RS256-jwks", func(c *authConfig) { c.JWT.JWKSURL = ks.URL }, jwttest.Sign(b, jwt.SigningMethodRS256, rsaKey, "r", claims)},
		{"ES256-jwks", func(c *authConfig) { c.JWT.JWKSURL = ks.URL }, jwttest.Sign(b, jwt.SigningMethodES256, ecKey, "e", claims)},
		{"ES256-jwks-aud", func(c *authConfig) { c.JWT.JWKSURL, c.JWT.Audience = ks.URL, "rt" }, jwttest.Sign(b, jwt.SigningMethodES256, ecKey, "e", claims)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := authed()
			bc.cfg(&cfg)
			g, _ := newGate(b, cfg)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.VerifyToken(ctx, bc.tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
