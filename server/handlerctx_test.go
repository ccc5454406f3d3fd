package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/jwttest"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

type requestIDKey struct{}

// A handler sees what middleware put in the upgrade request's context,
// and the claims of the connection's token, though the request itself
// ended long before the call.
func TestHandlerSeesRequestValuesAndClaims(t *testing.T) {
	leakcheck.Check(t)
	cfg := handshake.DefaultConfig()
	m := metrics.NewDiscard()
	gate, err := handshake.New(cfg, handshake.Deps{Metrics: m, Tokens: testTokens(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, Deps{Gate: gate, Metrics: m})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Handle("whoami", func(ctx context.Context, req *Request) (any, error) {
		var claims struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(req.Claims, &claims); err != nil {
			return nil, err
		}
		id, _ := ctx.Value(requestIDKey{}).(string)
		return map[string]string{"requestID": id, "role": claims.Role, "user": req.User}, nil
	})
	withID := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, "req-42")))
	})
	hs := httptest.NewServer(withID)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.Close()
	})
	url := "ws" + strings.TrimPrefix(hs.URL, "http")

	tok := jwttest.Sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", jwt.MapClaims{
		"sub": "alice", "role": "admin", "exp": time.Now().Add(time.Hour).Unix(),
	})
	c := wstest.Dial(t, url+"?token="+tok)
	f := c.Call("whoami", `{}`)
	wstest.MustOK(t, f)
	if want := `{"requestID":"req-42","role":"admin","user":"alice"}`; string(f.Result) != want {
		t.Fatalf("handler saw %s, want %s", f.Result, want)
	}

	// Anonymous: no claims.
	s2, url2 := startServer(t, Deps{})
	s2.Handle("claims", func(ctx context.Context, req *Request) (any, error) {
		return map[string]bool{"none": req.Claims == nil}, nil
	})
	f = wstest.Dial(t, url2).Call("claims", `{}`)
	wstest.MustOK(t, f)
	if string(f.Result) != `{"none":true}` {
		t.Fatalf("anonymous claims: %s", f.Result)
	}
}
