package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// rateLimited asserts f is a -32002 answer and returns its data.
func rateLimited(t *testing.T, f wstest.Frame) protocol.RateLimitedData {
	t.Helper()
	if f.Error == nil || f.Error.Code != protocol.CodeRateLimited {
		t.Fatalf("got %+v, want -32002", f)
	}
	var d protocol.RateLimitedData
	if err := json.Unmarshal(f.Error.Data, &d); err != nil || d.RetryAfterMs <= 0 {
		t.Fatalf("-32002 data %s", f.Error.Data)
	}
	return d
}

// A slidingWindow rate through the binary: limit calls per key, then
// -32002 with the window's wait.
func TestSlidingWindowRateThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `
admission:
  classes:
    fair: {rate: {limit: 3, per: 1m, by: conn, strategy: slidingWindow}}
  methods: {subscribe: fair}
`)
	c := wstest.Dial(t, p.WS())
	for _, topic := range []string{"a", "b", "c"} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"`+topic+`"}`))
	}
	d := rateLimited(t, c.Call("subscribe", `{"topic":"d"}`))
	if d.Class != "fair" || d.Limit != 3 || d.Remaining != 0 || d.Reason != "" {
		t.Fatalf("-32002 data %+v", d)
	}
	if d.RetryAfterMs < 59_000 || d.RetryAfterMs > 60_000 {
		t.Fatalf("retryAfterMs %d, want about a minute (the oldest call leaves the window)", d.RetryAfterMs)
	}
	// Another connection has its own window.
	wstest.MustOK(t, wstest.Dial(t, p.WS()).Call("subscribe", `{"topic":"a"}`))
}

// Bad values of the rule parts' keys stop start-up with an error naming
// the key.
func TestBadRuleValuesStopStartup(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		give    string
		wantKey string
	}{
		{"fair: {rate: {limit: 3, per: 1m, strategy: leaky}}", "admission.classes.fair.rate.strategy"},
		{"g: {rate: {limit: 3, per: 1m, scope: planet}}", "admission.classes.g.rate.scope"},
		{"g: {rate: {limit: 3, per: 1m, scope: cluster}}", "admission.classes.g.rate.scope"}, // no redis.url
		{"f: {cost: {budget: 0, per: 1m, of: bytes}}", "admission.classes.f.cost.budget"},
		{"f: {cost: {budget: 10, per: -1s, of: bytes}}", "admission.classes.f.cost.per"},
		{"f: {cost: {budget: 10, per: 1m, of: tokens}}", "admission.classes.f.cost.of"},
		{"f: {cost: {budget: 10, per: 1m, of: bytes, by: topic}}", "admission.classes.f.cost.by"},
		{"f: {cost: {budget: 10, per: 1m, of: bytes, scope: cluster}}", "admission.classes.f.cost.scope"},
		{"f: {cost: {budget: 10, per: 1m, of: bytes, bogus: 1}}", "admission.classes.f.cost.bogus"},
		{"llm: {adaptiveConcurrency: {min: 0, max: 8}}", "admission.classes.llm.adaptiveConcurrency.min"},
		{"llm: {adaptiveConcurrency: {min: 9, max: 8}}", "admission.classes.llm.adaptiveConcurrency.max"},
	}
	for _, tt := range tests {
		t.Run(tt.wantKey, func(t *testing.T) {
			p := startNoWait(t, "admission:\n  classes:\n    "+tt.give+"\n")
			if code := p.exitCode(30 * time.Second); code == 0 {
				t.Fatalf("rtserver started with %s", tt.give)
			}
			if out := p.log.String(); !strings.Contains(out, tt.wantKey) {
				t.Fatalf("start-up error does not name %s:\n%s", tt.wantKey, out)
			}
		})
	}
}

// publishUntilShed publishes to topic from c until the class answers
// -32002 with reason COST, and returns how many publishes were admitted.
func publishUntilShed(t *testing.T, c *wstest.Conn, topic string) int {
	t.Helper()
	data := `"` + strings.Repeat("x", 100) + `"`
	for n := 0; n < 10_000; n++ {
		f := c.Call("publish", `{"topic":"`+topic+`","data":`+data+`}`)
		if f.Error != nil {
			if d := rateLimited(t, f); d.Reason != "COST" || d.Class != "fanout" {
				t.Fatalf("-32002 data %+v, want class fanout, reason COST", d)
			}
			return n
		}
	}
	t.Fatal("the cost budget never ran out")
	return 0
}

// cost of: fanout through the binary: a publish to a topic with 10
// subscribers here is charged ten times one to a topic with 1.
func TestCostFanoutThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `
admission:
  classes:
    fanout: {cost: {budget: 40000, per: 1h, of: fanout, by: conn}}
  methods: {publish: fanout}
`)
	for i := range 10 {
		sub := wstest.Dial(t, p.WS())
		wstest.MustOK(t, sub.Call("subscribe", `{"topic":"big"}`))
		if i == 0 {
			wstest.MustOK(t, sub.Call("subscribe", `{"topic":"one"}`))
		}
	}
	big := publishUntilShed(t, wstest.Dial(t, p.WS()), "big")
	one := publishUntilShed(t, wstest.Dial(t, p.WS()), "one")
	t.Logf("admitted on a budget of 40,000: %d publishes to 10 subscribers, %d to 1", big, one)
	if big < 2 || one < 9*big || one > 11*big+10 {
		t.Fatalf("admitted %d publishes to 10 subscribers and %d to 1: want about ten times as many to 1", big, one)
	}
	if v := p.metric(`admission_rejected_total{class="fanout",reason="COST"}`); v != 2 {
		t.Fatalf(`admission_rejected_total{class="fanout",reason="COST"} = %v, want 2`, v)
	}
}

// adaptiveConcurrency through the binary: the limit starts at min (the
// no-load latency is probed first) and is exported; calls past it are
// shed with CONCURRENCY; as calls complete it rises, never past max.
func TestAdaptiveConcurrencyThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	be := newBackend(t)
	p := start(t, fmt.Sprintf(`
rpc: {proxy: {url: %q}}
admission:
  classes:
    llm: {adaptiveConcurrency: {min: 2, max: 8}}
  methods: {block: llm, echo: llm}
`, be.URL))
	const gauge = `admission_concurrency_limit{class="llm"}`
	if v := p.metric(gauge); v != 2 {
		t.Fatalf("%s = %v at start, want min 2", gauge, v)
	}
	held := []*wstest.Conn{wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS())}
	for i, c := range held {
		c.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"block"}`, i))
	}
	p.waitMetric(`admission_accepted_total{class="llm"}`, 10*time.Second, func(v float64) bool { return v == 2 })
	c := wstest.Dial(t, p.WS())
	if d := overloaded(t, c.Call("echo", `{}`)); d.Class != "llm" || d.Reason != "CONCURRENCY" {
		t.Fatalf("third call shed with %+v, want CONCURRENCY", d)
	}
	be.unblock()
	for _, h := range held {
		wstest.MustOK(t, h.Recv())
	}
	// Completed calls end the probe and feed the controller: the limit
	// climbs while calls keep the class busy.
	testkit.Eventually(t, 30*time.Second, "the adaptive limit to rise", func() bool {
		for range 4 {
			wstest.MustOK(t, c.Call("echo", `{}`))
		}
		return p.metric(gauge) > 2
	})
	if v := p.metric(gauge); v > 8 {
		t.Fatalf("%s = %v, over max 8", gauge, v)
	}
}

// scope: cluster through two binaries on one real redis-server: together
// they admit one instance's limit; with Redis gone the part is decided by
// admission.failPolicy (open here) and counted.
func TestClusterScopedRateAcrossInstances(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := fleetConfig(r.URL(), `
admission:
  classes:
    global: {rate: {limit: 5, per: 1h, by: ip, scope: cluster}}
  methods: {subscribe: global}
`)
	a, b := start(t, cfg), start(t, cfg)
	ca, cb := wstest.Dial(t, a.WS()), wstest.Dial(t, b.WS())
	admitted := 0
	for i := range 10 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		f := c.Call("subscribe", fmt.Sprintf(`{"topic":"t%d"}`, i))
		if f.Error == nil {
			admitted++
			continue
		}
		if d := rateLimited(t, f); d.Class != "global" || d.Limit != 5 {
			t.Fatalf("-32002 data %+v", d)
		}
	}
	if admitted != 5 {
		t.Fatalf("two instances admitted %d, want the one shared limit 5", admitted)
	}
	r.Stop()
	wstest.MustOK(t, ca.Call("subscribe", `{"topic":"after-redis"}`)) // fail open
	if v := a.metric(`admission_rule_errors_total{class="global"}`); v < 1 {
		t.Fatalf("admission_rule_errors_total = %v with Redis down, want counted", v)
	}
}

// The same on the sharded bus's real 3-node Redis Cluster, with rate and
// cost fused in one script (one slot: the keys share a hash tag), on two
// instances, for three classes whose keys land on different slots.
func TestClusterScopedRateOnRedisCluster(t *testing.T) {
	leakcheck.Check(t)
	cl := redistest.StartCluster(t)
	cfg := fleetConfig(clusterURL(cl), `
admission:
  classes:
    g1: &g {rate: {limit: 4, per: 1h, by: ip, scope: cluster}, cost: {budget: 1000000, per: 1h, of: bytes, by: ip, scope: cluster}}
    g2: *g
    g3: *g
  methods: {subscribe: g1, unsubscribe: g2, publish: g3}
`)
	cfg = strings.Replace(cfg, "redis: {url:", "redis: {bus: sharded, partitions: 8, url:", 1)
	a, b := start(t, cfg), start(t, cfg)
	ca, cb := wstest.Dial(t, a.WS()), wstest.Dial(t, b.WS())
	for _, m := range []struct{ method, class, params string }{
		{"subscribe", "g1", `{"topic":"t"}`},
		{"unsubscribe", "g2", `{"topic":"t"}`},
		{"publish", "g3", `{"topic":"t","data":1}`},
	} {
		for i := range 4 { // alternating instances share the one budget
			c := ca
			if i%2 == 1 {
				c = cb
			}
			wstest.MustOK(t, c.Call(m.method, m.params))
		}
		if d := rateLimited(t, ca.Call(m.method, m.params)); d.Class != m.class || d.Reason != "" || d.Limit != 4 {
			t.Fatalf("fifth %s: %+v, want RATE of %s with limit 4", m.method, d, m.class)
		}
	}
	for _, p := range []*proc{a, b} {
		for _, class := range []string{"g1", "g2", "g3"} {
			if v := p.metric(`admission_rule_errors_total{class="` + class + `"}`); v != 0 {
				t.Fatalf("admission_rule_errors_total{class=%q} = %v on a healthy cluster", class, v)
			}
		}
	}
}

// cost of: param:<name> and of: bytes through the binary: the param is
// charged, a call without it is decided by failPolicy (open) and counted;
// bytes charge the request frame.
func TestCostParamAndBytesThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	be := newBackend(t)
	p := start(t, fmt.Sprintf(`
rpc: {proxy: {url: %q}}
admission:
  classes:
    llm: {cost: {budget: 100, per: 1h, of: "param:maxTokens", by: conn}}
    upload: {cost: {budget: 300, per: 1h, of: bytes, by: conn}}
  methods: {complete: llm, upload: upload}
`, be.URL))
	c := wstest.Dial(t, p.WS())
	wstest.MustOK(t, c.Call("complete", `{"maxTokens":60}`))
	if d := rateLimited(t, c.Call("complete", `{"maxTokens":60}`)); d.Reason != "COST" || d.Class != "llm" || d.Remaining != 0 {
		t.Fatalf("second 60 of 100: %+v, want COST", d)
	}
	wstest.MustOK(t, c.Call("complete", `{"maxTokens":40}`))
	wstest.MustOK(t, c.Call("complete", `{"prompt":"no maxTokens"}`)) // failPolicy open
	if v := p.metric(`admission_rule_errors_total{class="llm"}`); v != 1 {
		t.Fatalf(`admission_rule_errors_total{class="llm"} = %v, want 1`, v)
	}
	big := `{"blob":"` + strings.Repeat("x", 150) + `"}`
	wstest.MustOK(t, c.Call("upload", big)) // ~200 bytes of 300
	if d := rateLimited(t, c.Call("upload", big)); d.Reason != "COST" || d.Class != "upload" {
		t.Fatalf("second upload: %+v, want COST", d)
	}
}
