package e2e

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/wstest"
)

// In merged mode (publishRate.mode: merged, signed) the fleet's view
// comes from one merging instance: two instances each publish a topic
// below the threshold, and the third sheds it because the merged view
// sums both. Killing any one instance, the merging one included, the view
// recovers: the two left still see each other.
func TestClusterTopPublisherInMergedMode(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := strings.Replace(signedFleetConfig(r.URL(), `
admission:
  classes: {broadcast: {clusterTopPublisher: {threshold: 70, by: topic}}}
  methods: {publish: broadcast}
`), "mode: broadcast", "mode: merged", 1)
	a, b, c := start(t, cfg), start(t, cfg), start(t, cfg)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	paced(t, a, "hot", 50, stop, &wg)
	paced(t, b, "hot", 50, stop, &wg)
	defer func() { close(stop); wg.Wait() }()

	for _, n := range []*proc{a, b, c} {
		n.waitMetric("cluster_publish_rate_instances", 20*time.Second, func(v float64) bool { return v == 2 })
	}
	c.waitMetric(`cluster_topic_publish_rate{topic="hot"}`, 20*time.Second, func(v float64) bool { return v >= 70 })
	cc := wstest.Dial(t, c.WS())
	d := overloaded(t, cc.Call("publish", `{"topic":"hot","data":1}`))
	if d.Reason != "CLUSTER_TOP_PUBLISHER" || d.Class != "broadcast" {
		t.Fatalf("C shed hot with %+v", d)
	}
	wstest.MustOK(t, cc.Call("publish", `{"topic":"calm","data":1}`))
	if v := c.metric("cluster_publish_rate_parse_errors_total"); v != 0 {
		t.Errorf("C dropped %v envelopes", v)
	}

	// C does not publish: killing it leaves A and B, whichever merged.
	c.cmd.Process.Signal(syscall.SIGKILL)
	for _, n := range []*proc{a, b} {
		n.waitMetric("cluster_publish_rate_instances", 20*time.Second, func(v float64) bool { return v == 1 })
		n.waitMetric(`cluster_topic_publish_rate{topic="hot"}`, 20*time.Second, func(v float64) bool { return v >= 70 })
	}
}
