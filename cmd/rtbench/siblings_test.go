package main

import (
	"testing"
	"time"

	rtserver "github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/redistest"
)

// TestSiblingsAgainstRealNode: simulated siblings' envelopes, signed as
// docs/cluster.md says, are accepted by a real node on a real Redis; its
// view counts them all and sums the hot topic spread over them, and they
// leave it once silent.
func TestSiblingsAgainstRealNode(t *testing.T) {
	for _, mode := range []string{"broadcast", "merged"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			siblingsAgainstRealNode(t, mode)
		})
	}
}

func siblingsAgainstRealNode(t *testing.T, mode string) {
	srv := redistest.Start(t)
	const secret = "fleet-secret"
	u, _ := startNode(t, func(c *rtserver.Config) {
		c.PublishRate.Mode = mode
		c.Redis.URL = srv.URL()
		c.PublishRate.PublishInterval = 100 * time.Millisecond
		// Far above the interval, so a busy machine delaying the
		// simulator cannot make a sibling stale before the view is read.
		c.PublishRate.StaleAfter = 2 * time.Second
		c.PublishRate.HMACSecret = []byte(secret)
		// The topic gauges the view is read from follow each sample.
		c.Pressure.SampleInterval = 50 * time.Millisecond
	})
	// Three seconds, not one: the run must see the view catch the hot user
	// and then measure, and a busy machine can delay the catch past a second.
	res, err := runSiblings(testCtx(t), siblingsConfig{
		RedisURL: srv.URL(), Channel: "rt:pressure:rates", Mode: mode, N: 7, Interval: 100 * time.Millisecond, Duration: 3 * time.Second,
		TopN: 20, Secret: secret, Churn: 0.2, HotRate: 700, MetricsURL: metricsURL(u), Stale: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ViewCorrect || res.Received == 0 {
		t.Errorf("view wrong: %+v", res)
	}
	if mode == "merged" && res.UserCatchSecs == 0 {
		t.Errorf("no merged view with the hot user: %+v", res)
	}
	// Broadcast: a sibling leaves staleAfter after its last envelope at
	// the earliest. Merged: also when the views stop (the merging
	// instance lost its lease for a while: a test interval of 100ms makes
	// a lease of 150ms), staleAfter after the last view, which may be
	// earlier.
	if mode == "broadcast" && res.StaleSeconds < 2 {
		t.Errorf("siblings left the view %.3f s after their last envelope, before staleAfter", res.StaleSeconds)
	}
}

func TestSiblingsRefusesRemoteRedis(t *testing.T) {
	t.Parallel()
	for _, give := range []string{"redis://10.0.0.1:6379", "rediss://127.0.0.1:6379", "redis://example.com:6379"} {
		if err := checkRedisURL(give); err == nil {
			t.Errorf("checkRedisURL(%q) accepted", give)
		}
	}
}
