package bus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// Every invalid redis.sentinel.* value is named by its key.
func TestConfigValidateSentinel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give    Config
		wantKey string
	}{
		{Config{URL: "redis://m", Sentinel: Sentinel{Addrs: []string{"127.0.0.1"}}}, "redis.sentinel.addrs[0]: "},
		{Config{Sentinel: Sentinel{Addrs: []string{"127.0.0.1:26379"}}}, "redis.sentinel.addrs: "},
		{Config{URL: "redis://m?addr=h:1", Sentinel: Sentinel{Addrs: []string{"127.0.0.1:26379"}}}, "redis.sentinel.addrs: "},
		{Config{URL: "redis://m", Sentinel: Sentinel{Password: "p"}}, "redis.sentinel.password: "},
	}
	for _, tt := range tests {
		err := tt.give.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.wantKey) {
			t.Errorf("%+v: Validate() = %v, want it to name %q", tt.give, err, tt.wantKey)
		}
	}
	// A bad URL is named without its password.
	for _, bad := range []string{"http://user:s3cret-pw@host:6379", "redis://user:s3cret-pw@host:6379/%zz"} {
		err := Config{URL: bad}.Validate()
		if err == nil || !strings.Contains(err.Error(), "redis.url: ") || strings.Contains(err.Error(), "s3cret-pw") {
			t.Errorf("Validate(%q) = %v, want a redis.url problem without the password", bad, err)
		}
	}
	ok := Config{URL: "rediss://:pw@mymaster/2", Sentinel: Sentinel{Addrs: []string{"s1:26379", "s2:26379", "[::1]:26379"}, Password: "sp"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	if _, err := NewClient(Config{URL: "redis://m?addr=h:1", Sentinel: Sentinel{Addrs: []string{"h:2"}}}); err == nil {
		t.Error("NewClient with Sentinel and Cluster nodes: no error")
	}
	if _, err := NewClient(Config{}); err == nil {
		t.Error("NewClient without a URL: no error")
	}
}

// With redis.sentinel.addrs, the client finds the primary through the
// Sentinels (redis.url's host, the monitored name, resolves to nothing),
// and after the primary dies it follows the promotion: a write that
// succeeds lands on the promoted replica.
func TestNewClientFollowsSentinelPromotion(t *testing.T) {
	s := redistest.StartSentinel(t)
	c, err := NewClient(Config{URL: s.URL() + "/0", Sentinel: Sentinel{Addrs: s.Addrs}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Primary.Do("GET", "before"); err != nil || !strings.HasPrefix(r, "$1") {
		t.Fatalf("the write did not reach the primary: %q, %v", r, err)
	}
	s.Primary.Stop()
	testkit.Eventually(t, 2*waitLimit, "a write to succeed after the primary died", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Set(ctx, "after", "1", 0).Err() == nil
	})
	if r, err := s.Replica.Do("GET", "after"); err != nil || !strings.HasPrefix(r, "$1") {
		t.Fatalf("the write after the fail-over did not reach the promoted replica: %q, %v", r, err)
	}
}
