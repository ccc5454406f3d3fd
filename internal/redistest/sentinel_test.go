package redistest

import (
	"testing"
	"time"
)

// Killing the primary makes the Sentinels promote the replica.
func TestSentinelPromotesTheReplica(t *testing.T) {
	s := StartSentinel(t)
	if got, err := s.PrimaryAddr(); err != nil || got != s.Primary.Addr {
		t.Fatalf("primary %q (%v), want %s", got, err, s.Primary.Addr)
	}
	s.Primary.Stop()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, _ := s.PrimaryAddr()
		if got == s.Replica.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no promotion within 60s: the Sentinels name %q", got)
		}
		time.Sleep(50 * time.Millisecond) // polling processes we do not control
	}
	if r, err := s.Replica.Do("SET", "k", "v"); err != nil || r != "+OK" {
		t.Fatalf("SET on the promoted replica: %q, %v", r, err)
	}
}
