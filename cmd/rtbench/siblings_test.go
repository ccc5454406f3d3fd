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
	t.Parallel()
	srv := redistest.Start(t)
	const secret = "fleet-secret"
	u, _ := startNode(t, func(c *rtserver.Config) {
		c.Redis.URL = srv.URL()
		c.PublishRate.PublishInterval = 100 * time.Millisecond
		// Far above the interval, so a busy machine delaying the
		// simulator cannot make a sibling stale before the view is read.
		c.PublishRate.StaleAfter = 2 * time.Second
		c.PublishRate.HMACSecret = []byte(secret)
		// The topic gauges the view is read from follow each sample.
		c.Pressure.SampleInterval = 50 * time.Millisecond
	})
	res, err := runSiblings(testCtx(t), siblingsConfig{
		RedisURL: srv.URL(), Channel: "rt:pressure:rates", N: 7, Interval: 100 * time.Millisecond, Duration: 400 * time.Millisecond,
		TopN: 20, Secret: secret, Churn: 0.2, HotRate: 700, MetricsURL: metricsURL(u), Stale: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ViewCorrect || res.Received == 0 {
		t.Errorf("view wrong: %+v", res)
	}
	if res.StaleSeconds < 2 {
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
