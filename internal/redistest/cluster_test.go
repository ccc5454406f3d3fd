package redistest

import (
	"strings"
	"testing"
)

func TestStartCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs) != 3 {
		t.Fatalf("got %d nodes, want 3", len(c.Addrs))
	}
	for _, s := range c.Nodes {
		info := clusterInfo(s)
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(info, want) {
				t.Errorf("%s: CLUSTER INFO lacks %q:\n%s", s.Addr, want, info)
			}
		}
	}
	// A key lands on exactly one node: the others answer MOVED.
	var ok, moved int
	for _, s := range c.Nodes {
		r, err := s.Do("SET", "k", "v")
		switch {
		case err != nil:
			t.Fatal(err)
		case r == "+OK":
			ok++
		case strings.HasPrefix(r, "-MOVED"):
			moved++
		default:
			t.Errorf("SET on %s: %q", s.Addr, r)
		}
	}
	if ok != 1 || moved != 2 {
		t.Errorf("SET k: %d nodes stored it, %d redirected; want 1 and 2", ok, moved)
	}
	c.Stop()
	c.Stop() // idempotent
}
