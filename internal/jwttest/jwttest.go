// Package jwttest serves JSON Web Key Sets and signs tokens for tests of
// rtserver's authentication: a real HTTP key server whose set a test
// replaces (key rotation) and whose requests it counts. The handshake
// package's tests and the black-box e2e tests both use it.
package jwttest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// KeyServer serves a JWK set at its URL. It is closed when the test ends.
type KeyServer struct {
	*httptest.Server
	mu   sync.Mutex
	body []byte // nil: answer 500
	hits atomic.Int64
}

// NewKeyServer starts a key server that answers 500 until Serve is called.
func NewKeyServer(t testing.TB) *KeyServer {
	t.Helper()
	ks := &KeyServer{}
	ks.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.hits.Add(1)
		ks.mu.Lock()
		body := ks.body
		ks.mu.Unlock()
		if body == nil {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(ks.Close)
	return ks
}

// Serve replaces the set with these public keys, by kid (signature use).
func (ks *KeyServer) Serve(t testing.TB, keys map[string]any) {
	t.Helper()
	var set jwkset.JWKSMarshal
	for kid, pub := range keys {
		j, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatal(err)
		}
		set.Keys = append(set.Keys, j.Marshal())
	}
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	ks.ServeRaw(body)
}

// ServeRaw replaces the answer with body as is (nil: 500).
func (ks *KeyServer) ServeRaw(body []byte) {
	ks.mu.Lock()
	ks.body = body
	ks.mu.Unlock()
}

// Hits is the number of requests served so far.
func (ks *KeyServer) Hits() int64 { return ks.hits.Load() }

// Sign returns a token signed with key, with a kid header unless kid is
// empty.
func Sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
