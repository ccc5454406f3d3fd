package main

import (
	"testing"
	"time"

	rtserver "github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/history"
)

// A small recovery storm against an in-process node: every client
// recovers every missed message, once each, in order.
func TestRecoverStormCatchesEveryoneUp(t *testing.T) {
	t.Parallel()
	u, _ := startNode(t, func(cfg *rtserver.Config) {
		cfg.Topics.Namespaces = []access.Namespace{{Pattern: "room:*", Rule: access.Rule{
			Subscribe: []string{access.GrantAny}, Publish: []string{access.GrantAny},
			History: history.Policy{Size: 1000, TTL: time.Minute},
		}}}
	})
	res, err := runRecover(testCtx(t), recoverConfig{URL: u, N: 30, T: 3, Missed: 120, Size: 50, Prefix: "room:"})
	if err != nil {
		t.Fatal(err)
	}
	if res.CaughtUp != 30 || res.Replayed != 30*120 || res.Closed1013 != 0 || len(res.Failures) > 0 {
		t.Fatalf("%+v", res)
	}
}

// Without history on the topics, the mode says so instead of measuring.
func TestRecoverNeedsHistory(t *testing.T) {
	t.Parallel()
	u, _ := startNode(t, nil)
	if _, err := runRecover(testCtx(t), recoverConfig{URL: u, N: 2, T: 1, Missed: 1, Prefix: "room:"}); err == nil {
		t.Fatal("no error on topics without history")
	}
}
