package e2e

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// flood publishes notifications to topic from its own connection until
// stop is closed.
func flood(t *testing.T, p *proc, topic string, stop <-chan struct{}, wg *sync.WaitGroup) {
	c := wstest.Dial(t, p.WS())
	wg.Add(1)
	go func() {
		defer wg.Done()
		frame := `{"jsonrpc":"2.0","method":"publish","params":{"topic":"` + topic + `","data":1}}`
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !c.TrySend(frame) {
				return
			}
		}
	}()
}

func overloaded(t *testing.T, f wstest.Frame) protocol.OverloadedData {
	t.Helper()
	if f.Error == nil || f.Error.Code != protocol.CodeOverloaded {
		t.Fatalf("got %+v, want -32001", f)
	}
	var d protocol.OverloadedData
	if err := json.Unmarshal(f.Error.Data, &d); err != nil || d.RetryAfterMs <= 0 {
		t.Fatalf("-32001 data %s", f.Error.Data)
	}
	return d
}

// Publish traffic above pressure.publishRatePerSec sheds a class listing
// PUBLISH_RATE while a class without it still runs; when the traffic
// stops the class is admitted again; a rate-limited class answers -32002;
// the metrics move with each decision.
func TestPublishRatePressureShedsExpensiveClass(t *testing.T) {
	leakcheck.Check(t)
	be := newBackend(t)
	p := start(t, fmt.Sprintf(`
pressure: {sampleInterval: 200ms, publishRatePerSec: 200}
rpc: {proxy: {url: %q}}
admission:
  classes:
    expensive: {reasons: [MEMORY, PUBLISH_RATE]}
    cheap: {reasons: [MEMORY]}
    chatty: {rate: {limit: 2, per: 1m, by: user}}
  methods: {"report.*": expensive, lookup: cheap, chat.say: chatty}
`, be.URL))
	c := wstest.Dial(t, p.WS())
	wstest.MustOK(t, c.Call("report.daily", `{}`))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	flood(t, p, "firehose", stop, &wg)
	// One scrape shows both: the reason active and the rate that set it
	// (on a loaded machine the flood can stall for a sample interval, and
	// a second scrape would read the next sample's rate).
	testkit.Eventually(t, 30*time.Second, "PUBLISH_RATE active with pressure_publish_rate >= 200", func() bool {
		m := p.metrics()
		return m[`pressure_reason{reason="PUBLISH_RATE"}`] == 1 && m["pressure_publish_rate"] >= 200
	})
	d := overloaded(t, c.Call("report.daily", `{}`))
	if d.Class != "expensive" || d.Reason != "PUBLISH_RATE" {
		t.Fatalf("shed with %+v, want class expensive, reason PUBLISH_RATE", d)
	}
	wstest.MustOK(t, c.Call("lookup", `{}`))
	close(stop)
	wg.Wait()

	p.waitMetric(`pressure_reason{reason="PUBLISH_RATE"}`, 30*time.Second, func(v float64) bool { return v == 0 })
	wstest.MustOK(t, c.Call("report.daily", `{}`))

	wstest.MustOK(t, c.Call("chat.say", `{}`))
	wstest.MustOK(t, c.Call("chat.say", `{}`))
	f := c.Call("chat.say", `{}`)
	if f.Error == nil || f.Error.Code != protocol.CodeRateLimited {
		t.Fatalf("third chat.say: %+v", f)
	}
	var rl protocol.RateLimitedData
	if err := json.Unmarshal(f.Error.Data, &rl); err != nil || rl.RetryAfterMs <= 0 || rl.Class != "chatty" || rl.Limit != 2 {
		t.Fatalf("-32002 data %s", f.Error.Data)
	}

	m := p.metrics()
	for series, want := range map[string]float64{
		`admission_accepted_total{class="expensive"}`:                       2,
		`admission_rejected_total{class="expensive",reason="PUBLISH_RATE"}`: 1,
		`admission_accepted_total{class="cheap"}`:                           1,
		`admission_accepted_total{class="chatty"}`:                          2,
		`admission_rejected_total{class="chatty",reason="RATE"}`:            1,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
}

// Without Redis, clusterTopPublisher reads this instance's own top
// publishers: a topic published at or above the threshold is shed with
// CLUSTER_TOP_PUBLISHER while a quiet topic is still admitted.
func TestTopPublisherRuleWithoutRedis(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `
pressure: {sampleInterval: 200ms}
admission:
  classes:
    broadcast: {clusterTopPublisher: {threshold: 100, by: topic}}
  methods: {publish: broadcast}
`)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	flood(t, p, "hot", stop, &wg)
	defer func() { close(stop); wg.Wait() }()
	p.waitMetric(`ws_topic_publish_rate{topic="hot"}`, 30*time.Second, func(v float64) bool { return v >= 100 })
	c := wstest.Dial(t, p.WS())
	d := overloaded(t, c.Call("publish", `{"topic":"hot","data":1}`))
	if d.Reason != "CLUSTER_TOP_PUBLISHER" || d.Class != "broadcast" {
		t.Fatalf("shed with %+v", d)
	}
	wstest.MustOK(t, c.Call("publish", `{"topic":"quiet","data":1}`))
}
