package redistest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// Cluster is a 3-node Redis Cluster (three masters, no replicas) on
// loopback, each node a Server started with cluster mode on.
type Cluster struct {
	Addrs []string // 127.0.0.1:port of each node
	Nodes []*Server
}

// StartCluster starts three cluster-enabled redis-server processes on free
// ports, joins them with `redis-cli --cluster create` (slots split evenly,
// no replicas) and waits until every node reports cluster_state:ok. The
// cluster is stopped when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	testkit.Program(t, "redis-server", "apt-get install redis-server")
	testkit.Program(t, "redis-cli", "apt-get install redis-tools")
	c := &Cluster{}
	for range 3 {
		// Start picks the port and gives each server a directory of its
		// own (--dir), where a relative nodes file lands: one per node.
		s := Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	t.Cleanup(c.Stop)

	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}

	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		for !clusterOK(s) {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok: %s", s.Addr, clusterInfo(s))
			}
			time.Sleep(50 * time.Millisecond) // polling processes we do not control
		}
	}
	return c
}

// Stop stops every node. Idempotent.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

func clusterOK(s *Server) bool {
	return strings.Contains(clusterInfo(s), "cluster_state:ok")
}

// clusterInfo is CLUSTER INFO of one node. Do reads only the first line of
// a reply, and CLUSTER INFO is one multi-line bulk string, so this asks
// redis-cli.
func clusterInfo(s *Server) string {
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port),
		"cluster", "info").CombinedOutput()
	if err != nil {
		return err.Error() + ": " + string(out)
	}
	return string(out)
}
