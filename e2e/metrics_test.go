package e2e

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// contractMetrics are the names of docs/metrics.md.
var contractMetrics = []string{
	"admission_accepted_total", "admission_rejected_total",
	"handshake_accepted_total", "handshake_rejected_total", "handshake_inflight", "handshake_queue_depth",
	"connections_open",
	"pressure_reason", "pressure_publish_rate", "pressure_memory_ratio", "ws_topic_publish_rate",
	"cluster_publish_rate_broadcasts_total", "cluster_publish_rate_received_total",
	"cluster_publish_rate_parse_errors_total", "cluster_publish_rate_instances",
	"cluster_topic_publish_rate", "cluster_topic_publish_bytes",
	"bus_messages_published_total", "bus_messages_received_total", "bus_messages_dropped_total", "bus_degraded",
	"messages_sent_total", "slow_consumer_disconnects_total",
}

// The live exposition of a fleet member with traffic carries every metric
// of the contract (under metrics.namespace when set) and passes
// promtool check metrics.
func TestMetricsExpositionPassesPromtool(t *testing.T) {
	leakcheck.Check(t)
	promtool := testkit.Program(t, "promtool", "apt-get install prometheus; scripts/test.sh does")
	r := redistest.Start(t)
	cfg := fleetConfig(r.URL(), `
metrics: {namespace: rt}
admission:
  classes: {broadcast: {clusterTopPublisher: {threshold: 1000000}}}
  methods: {publish: broadcast}
`)
	a, b := start(t, cfg), start(t, cfg)
	sub := wstest.Dial(t, b.WS())
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"t"}`))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	paced(t, a, "t", 20, stop, &wg)
	defer func() { close(stop); wg.Wait() }()
	// Topic series exist only while the topic is in a top-N: A publishes
	// (local top-N), B hears of it (cluster top-N).
	a.waitMetric(`rt_ws_topic_publish_rate{topic="t"}`, 20*time.Second, func(v float64) bool { return v > 0 })
	b.waitMetric(`rt_cluster_topic_publish_rate{topic="t"}`, 20*time.Second, func(v float64) bool { return v > 0 })

	var all []byte
	for _, p := range []*proc{a, b} {
		resp, err := httpClient.Get(p.url("/metrics"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		all = append(all, body...)
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
	}
	for _, name := range contractMetrics {
		if !bytes.Contains(all, []byte("\n# TYPE rt_"+name+" ")) {
			t.Errorf("exposition lacks rt_%s", name)
		}
	}
}
