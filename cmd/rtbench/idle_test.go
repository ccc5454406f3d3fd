package main

import (
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/internal/testkit"
)

// With topics, each idle WebSocket (and each stream, with --sse-topics)
// is open and subscribed before the measurement: the server holds
// subscribers on every topic of the spread, and a connection whose
// subscribe is refused is a failure, not an idle connection.
func TestIdleTopicsSubscribeEachConnection(t *testing.T) {
	t.Parallel()
	open := map[string]func(idleConfig) (*idleResult, func(), error){
		"websocket": func(cfg idleConfig) (*idleResult, func(), error) { return openIdle(testCtx(t), cfg) },
		"stream":    func(cfg idleConfig) (*idleResult, func(), error) { return openIdleSSE(testCtx(t), cfg, cfg.Topics) },
	}
	for _, kind := range []string{"websocket", "stream"} {
		u, node := startNode(t, nil)
		res, closeConns, err := open[kind](idleConfig{URL: u, N: 20, C: 4, Topics: 4, MetricsURL: metricsURL(u)})
		if err != nil {
			t.Fatal(err)
		}
		topics := node.Info().Topics
		closeConns()
		if res.Connected != 20 || res.Open != 20 || res.Failed != 0 || res.Topics != 4 {
			t.Fatalf("%s: connected %d open %d failed %d (%v) topics %d, want 20, 20, 0, 4", kind, res.Connected, res.Open, res.Failed, res.FailKinds, res.Topics)
		}
		if res.ConnsOpen != 20 || topics != 4 {
			t.Fatalf("%s: server connections_open %v, topics with a subscriber %d; want 20, 4", kind, res.ConnsOpen, topics)
		}
		testkit.Eventually(t, 10*time.Second, kind+": subscriptions released after the close", func() bool { return node.Info().Topics == 0 })
	}

	u, node := startNode(t, func(cfg *rtserver.Config) {
		cfg.Topics.Namespaces = []access.Namespace{{Pattern: "room:*", Rule: access.Rule{Publish: []string{access.GrantAny}}}}
	})
	res, err := runIdle(testCtx(t), idleConfig{URL: u, N: 6, C: 2, Topics: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 0 || res.Failed != 6 || res.FailKinds["subscribe: refused -32003"] != 6 {
		t.Fatalf("refused subscribes: connected %d failed %d (%v), want 0, 6 (subscribe: refused -32003)", res.Connected, res.Failed, res.FailKinds)
	}
	testkit.Eventually(t, 10*time.Second, "refused connections closed", func() bool { return node.Info().Connections == 0 })
}
