package access

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/rtserver/rtserver/handshake"
)

// benchConfig is a typical deployment: private user topics, a claim-
// granted chat, a proxy-granted room namespace and an open default. Each
// benchmark's question is decided by the grant it names, after the
// namespace walk a real call does.
func benchChecker(b *testing.B, proxyURL string) *Checker {
	b.Helper()
	c, _ := newChecker(b, Config{
		Namespaces: []Namespace{
			{Pattern: "user:{user}", Rule: Rule{Subscribe: []string{"owner"}}},
			{Pattern: "user:*", Rule: Rule{}},
			{Pattern: "chat:*", Rule: Rule{Subscribe: []string{"authenticated"}, Publish: []string{"claim"}}},
			{Pattern: "room:*", Rule: Rule{Subscribe: []string{"proxy"}, Publish: []string{"proxy"}}},
		},
		Default: &Rule{Subscribe: []string{"any"}, Publish: []string{"authenticated"}},
		Proxy:   Proxy{URL: proxyURL, Timeout: time.Minute, CacheTTL: 1 << 62},
	})
	return c
}

func benchCheck(b *testing.B, c *Checker, q Question) {
	b.Helper()
	ctx := context.Background()
	if c.Check(ctx, q) != Allow {
		b.Fatalf("%+v not allowed", q)
	}
	b.ReportAllocs()
	for b.Loop() {
		if c.Check(ctx, q) != Allow {
			b.Fatal("denied")
		}
	}
}

func BenchmarkGrant(b *testing.B) {
	backend := newBenchBackend(b)
	c := benchChecker(b, backend)
	ip := netip.MustParseAddr("192.0.2.1")
	claim := &handshake.TopicClaim{Publish: []string{"chat:team-*", "chat:room-4*"}}
	b.Run("any", func(b *testing.B) {
		benchCheck(b, c, Question{Action: Subscribe, Topic: "news:sports", IP: ip})
	})
	b.Run("authenticated", func(b *testing.B) {
		benchCheck(b, c, Question{Action: Subscribe, Topic: "chat:room-42", User: "alice", IP: ip})
	})
	b.Run("owner", func(b *testing.B) {
		benchCheck(b, c, Question{Action: Subscribe, Topic: "user:alice", User: "alice", IP: ip})
	})
	b.Run("claim", func(b *testing.B) {
		benchCheck(b, c, Question{Action: Publish, Topic: "chat:room-42", User: "alice", Claim: claim, IP: ip})
	})
	b.Run("proxy-cached", func(b *testing.B) {
		benchCheck(b, c, Question{Action: Publish, Topic: "room:7", User: "alice", ConnID: 1, IP: ip})
	})
}

// newBenchBackend is a real backend that allows everything: the first
// proxy question is asked over HTTP, the benchmark loop hits the cache.
func newBenchBackend(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"allow":true}`)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}
