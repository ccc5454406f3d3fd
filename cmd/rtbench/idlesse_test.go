package main

import (
	"os"
	"testing"
)

// Not parallel, as TestIdleCountsServerConnections. Each stream is one
// of the server's connections, with a subscription (topics) or none.
func TestIdleSSECountsServerConnections(t *testing.T) {
	for _, topics := range []int{0, 4} {
		u, _ := startNode(t, nil) // a node each: the first run's streams end asynchronously
		res, err := runIdleSSE(testCtx(t), idleConfig{URL: u, N: 20, C: 4, ServerPID: os.Getpid(), MetricsURL: metricsURL(u)}, topics)
		if err != nil {
			t.Fatal(err)
		}
		if res.Connected != 20 || res.Open != 20 || res.Failed != 0 {
			t.Fatalf("topics %d: connected %d open %d failed %d (%v), want 20, 20, 0", topics, res.Connected, res.Open, res.Failed, res.FailKinds)
		}
		if res.ConnsOpen != 20 {
			t.Errorf("topics %d: server connections_open %v, want 20", topics, res.ConnsOpen)
		}
		if res.RSSAfter <= 0 || res.RSSBefore <= 0 {
			t.Errorf("topics %d: rss before %d after %d", topics, res.RSSBefore, res.RSSAfter)
		}
	}
}
