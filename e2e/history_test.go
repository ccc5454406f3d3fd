package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// historyConfig keeps history on room:* topics.
func historyConfig(size int, ttl string, extra string) string {
	return fmt.Sprintf(`topics:
  namespaces:
    - {pattern: "room:*", subscribe: [any], publish: [any], history: {size: %d, ttl: %s}}
%s`, size, ttl, extra)
}

type histResult struct {
	Epoch     string `json:"epoch"`
	Offset    uint64 `json:"offset"`
	Recovered *bool  `json:"recovered"`
	Reason    string `json:"reason"`
	Messages  []struct {
		Offset uint64          `json:"offset"`
		Data   json.RawMessage `json:"data"`
	} `json:"messages"`
}

func histCall(t *testing.T, c *wstest.Conn, method, params string) histResult {
	t.Helper()
	f := c.Call(method, params)
	wstest.MustOK(t, f)
	var r histResult
	if err := json.Unmarshal(f.Result, &r); err != nil || r.Epoch == "" {
		t.Fatalf("%s result %s: %v", method, f.Result, err)
	}
	return r
}

func recoverParams(topic, epoch string, offset uint64) string {
	return fmt.Sprintf(`{"topic":%q,"recover":true,"since":{"epoch":%q,"offset":%d}}`, topic, epoch, offset)
}

// readOffsets reads message notifications of topic until it has n, and
// returns their offsets; a resync fails the test.
func readOffsets(t *testing.T, c *wstest.Conn, topic string, n int) []uint64 {
	t.Helper()
	var offs []uint64
	for len(offs) < n {
		f := c.Recv()
		switch {
		case f.Method == "message" && f.Params.Topic == topic:
			offs = append(offs, f.Params.Offset)
		case f.Method == "system" && f.Params.Event == "resync":
			t.Fatalf("resync after %d messages", len(offs))
		}
	}
	return offs
}

func checkConsecutive(t *testing.T, what string, offs []uint64, from uint64) {
	t.Helper()
	for i, o := range offs {
		if o != from+uint64(i) {
			t.Fatalf("%s: message %d has offset %d, want %d", what, i, o, from+uint64(i))
		}
	}
}

// A slow reader cut with 1013 comes back with its position and gets
// every message it missed, once each, in order; its replay is paced by
// its send queue, so the replay itself never cuts it again.
func TestHistorySlowReaderCutWith1013RecoversEverything(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, historyConfig(100000, "5m", "limits: {sendQueueBytes: 65536}\n"))
	slow, pub := wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS())
	pos := histCall(t, slow, "subscribe", `{"topic":"room:slow"}`)
	data := `"` + strings.Repeat("x", 8000) + `"`
	publish := func(n int) {
		for range n {
			histCall(t, pub, "publish", `{"topic":"room:slow","data":`+data+`}`)
		}
	}
	publish(3)
	checkConsecutive(t, "before the stall", readOffsets(t, slow, "room:slow", 3), 1)
	// The slow client stops reading; publishes go on until it is cut.
	sent := 3
	for p.metric("slow_consumer_disconnects_total") == 0 {
		publish(50)
		sent += 50
		if sent > 20000 {
			t.Fatal("never cut")
		}
	}
	publish(5)
	sent += 5
	back := wstest.Dial(t, p.WS())
	r := histCall(t, back, "subscribe", recoverParams("room:slow", pos.Epoch, 3))
	if r.Recovered == nil || !*r.Recovered || r.Offset != uint64(sent) {
		t.Fatalf("recover: %+v, want recovered up to %d", r, sent)
	}
	publish(1)
	checkConsecutive(t, "recovered", readOffsets(t, back, "room:slow", sent-3+1), 4)
	if v := p.metric("slow_consumer_disconnects_total"); v != 1 {
		t.Fatalf("slow_consumer_disconnects_total = %v: the replay cut someone", v)
	}
	if v := p.metric(`history_recoveries_total{result="recovered"}`); v != 1 {
		t.Fatalf("recoveries counted %v", v)
	}
}

// A client away longer than ttl learns it missed messages that are gone:
// recovered false, reason trimmed, nothing replayed, live from the
// result's offset.
func TestHistoryAwayLongerThanTTL(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, historyConfig(100, "300ms", ""))
	c, pub := wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS())
	pos := histCall(t, c, "subscribe", `{"topic":"room:ttl"}`)
	c.WS.CloseNow()
	for range 3 {
		histCall(t, pub, "publish", `{"topic":"room:ttl","data":1}`)
	}
	testkit.Eventually(t, 10*time.Second, "the messages to expire", func() bool {
		return len(histCall(t, pub, "history", `{"topic":"room:ttl"}`).Messages) == 0
	})
	back := wstest.Dial(t, p.WS())
	r := histCall(t, back, "subscribe", recoverParams("room:ttl", pos.Epoch, pos.Offset))
	if r.Recovered == nil || *r.Recovered || r.Reason != "trimmed" || r.Offset != 3 {
		t.Fatalf("recover after ttl: %+v", r)
	}
	histCall(t, pub, "publish", `{"topic":"room:ttl","data":2}`)
	checkConsecutive(t, "live after trimmed", readOffsets(t, back, "room:ttl", 1), 4)
}

// An empty topic still has a position: subscribed, left, five messages
// published meanwhile, back with recover: exactly those five.
func TestHistoryEmptyTopicThenFiveWhileAway(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, historyConfig(100, "5m", ""))
	c, pub := wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS())
	pos := histCall(t, c, "subscribe", `{"topic":"room:empty"}`)
	if pos.Offset != 0 {
		t.Fatalf("an empty topic's position: %+v", pos)
	}
	c.WS.CloseNow()
	for i := range 5 {
		histCall(t, pub, "publish", fmt.Sprintf(`{"topic":"room:empty","data":%d}`, i))
	}
	back := wstest.Dial(t, p.WS())
	r := histCall(t, back, "subscribe", recoverParams("room:empty", pos.Epoch, 0))
	if r.Recovered == nil || !*r.Recovered || r.Offset != 5 {
		t.Fatalf("recover: %+v", r)
	}
	checkConsecutive(t, "recovered", readOffsets(t, back, "room:empty", 5), 1)
	// Nothing more: the next frame is the answer to this call.
	f := back.Call("unsubscribe", `{"topic":"room:empty"}`)
	wstest.MustOK(t, f)
}

// lb is a TCP load balancer for two instances: each new connection goes
// to the first backend whose /readyz answers 200, as a real one would
// route around an instance that is draining.
type lb struct {
	ln       net.Listener
	backends []*proc
	wg       sync.WaitGroup
}

func newLB(t *testing.T, backends ...*proc) *lb {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &lb{ln: ln, backends: backends}
	l.wg.Add(1)
	go l.serve()
	t.Cleanup(func() { ln.Close(); l.wg.Wait() })
	return l
}

func (l *lb) WS() string { return "ws://" + l.ln.Addr().String() + "/ws" }

func (l *lb) serve() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		var to string
		for _, b := range l.backends {
			if b.status("/readyz") == 200 {
				to = b.Addr
				break
			}
		}
		out, err := net.Dial("tcp", to)
		if to == "" || err != nil {
			in.Close()
			continue
		}
		l.wg.Add(2)
		go func() { defer l.wg.Done(); io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
		go func() { defer l.wg.Done(); io.Copy(in, out); in.Close() }()
	}
}

// Two instances on one Redis, Go-client subscribers on A, a publisher on
// B. A is drained (SIGTERM) mid-stream: every subscriber reconnects (to B,
// through the load balancer), recovers, and ends with every message
// exactly once, in order.
func TestHistoryDrainFailsOverWithoutLossOnRedis(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	drainFailover(t, fleetConfig(r.URL(), historyConfig(10000, "5m", "drain: {duration: 1s}\n")))
}

// The same on a real 3-node Redis Cluster with the sharded bus: the
// topic's stream, metadata and shard channel share one slot.
func TestHistoryDrainFailsOverWithoutLossOnRedisCluster(t *testing.T) {
	leakcheck.Check(t)
	cl := redistest.StartCluster(t)
	cfg := fleetConfig(clusterURL(cl), historyConfig(10000, "5m", "drain: {duration: 1s}\n"))
	drainFailover(t, strings.Replace(cfg, "redis: {url:", "redis: {bus: sharded, partitions: 8, url:", 1))
}

// drainFailover: 50 Go-client subscribers on A, 5,000 numbered messages
// published on B at up to 1,000/s, A drained after 1,500. Under the race
// detector (everything ten times slower on a shared machine) the same
// with 20 subscribers and 2,000 messages, A drained after 600.
func drainFailover(t *testing.T, cfg string) {
	a := start(t, cfg)
	b := start(t, cfg)
	front := newLB(t, a)
	subscribers, total, cutAt := 50, 5000, 1500
	if raceEnabled {
		subscribers, total, cutAt = 20, 2000, 600
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	type sub struct {
		c         *client.Client
		mu        sync.Mutex
		got       []int
		recovered []bool
		done      chan struct{}
	}
	subs := make([]*sub, subscribers)
	for i := range subs {
		s := &sub{done: make(chan struct{})}
		opts := client.DefaultOptions()
		opts.MinBackoff, opts.MaxBackoff = 50*time.Millisecond, time.Second
		opts.OnRecovery = func(_ string, ok bool, _ string) {
			s.mu.Lock()
			s.recovered = append(s.recovered, ok)
			s.mu.Unlock()
		}
		c, err := client.Dial(ctx, front.WS(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s.c = c
		if _, err := c.Subscribe(ctx, "room:deploy", func(_ string, data json.RawMessage) {
			var n int
			_ = json.Unmarshal(data, &n)
			s.mu.Lock()
			s.got = append(s.got, n)
			if len(s.got) == total {
				close(s.done)
			}
			s.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	front.backends = []*proc{a, b} // new connections: A while it is ready, else B

	pub, err := client.Dial(ctx, b.WS(), client.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var published atomic.Int64
	tick := time.NewTicker(time.Millisecond)
	for i := range total {
		<-tick.C
		if i == cutAt {
			a.signal(syscall.SIGTERM)
		}
		if _, err := pub.PublishAt(ctx, "room:deploy", i); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		published.Add(1)
	}
	tick.Stop()
	if code := a.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("A exit %d", code)
	}
	for i, s := range subs {
		select {
		case <-s.done:
		case <-ctx.Done():
			s.mu.Lock()
			t.Fatalf("subscriber %d: %d of %d messages", i, len(s.got), total)
		}
		s.mu.Lock()
		for n, v := range s.got {
			if v != n {
				t.Fatalf("subscriber %d: message %d is %d", i, n, v)
			}
		}
		if len(s.recovered) == 0 {
			t.Fatalf("subscriber %d never recovered", i)
		}
		for _, ok := range s.recovered {
			if !ok {
				t.Fatalf("subscriber %d: a recovery answered recovered false", i)
			}
		}
		s.mu.Unlock()
	}
}

// Redis stopped: publishing on a history topic and recovering answer
// -32001 HISTORY_UNAVAILABLE with a retry hint, and nothing is delivered
// without an offset. Redis back (empty: it kept nothing): publishing works
// again in a new epoch, the subscriber is told to resync and gets nothing
// of the new epoch until it subscribes again, and a recovery from the old
// position answers recovered false, reason epoch.
func TestHistoryRedisDownAndBack(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	p := start(t, fleetConfig(r.URL(), historyConfig(100, "5m", "")))
	sub, pub := wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS())
	pos := histCall(t, sub, "subscribe", `{"topic":"room:r"}`)
	histCall(t, pub, "publish", `{"topic":"room:r","data":1}`)
	checkConsecutive(t, "before", readOffsets(t, sub, "room:r", 1), 1)

	r.Stop()
	unavailable := func(f wstest.Frame) bool {
		return f.Error != nil && f.Error.Code == -32001 &&
			strings.Contains(string(f.Error.Data), `"HISTORY_UNAVAILABLE"`) && strings.Contains(string(f.Error.Data), `"retryAfterMs"`)
	}
	if f := pub.Call("publish", `{"topic":"room:r","data":2}`); !unavailable(f) {
		t.Fatalf("publish with Redis down: %+v", f)
	}
	other := wstest.Dial(t, p.WS())
	if f := other.Call("subscribe", recoverParams("room:r", pos.Epoch, 1)); !unavailable(f) {
		t.Fatalf("recover with Redis down: %+v", f)
	}

	r.Restart()
	var back histResult
	testkit.Eventually(t, 30*time.Second, "a publish to succeed once Redis is back", func() bool {
		f := pub.Call("publish", `{"topic":"room:r","data":3}`)
		if f.Error != nil {
			return false
		}
		_ = json.Unmarshal(f.Result, &back)
		return true
	})
	if back.Epoch == pos.Epoch || back.Offset != 1 {
		t.Fatalf("after Redis lost everything: %+v, was epoch %s", back, pos.Epoch)
	}
	// The old subscription is told to resync and gets nothing of the new
	// epoch until it subscribes again.
	for {
		f := sub.Recv()
		if f.Method == "message" {
			t.Fatalf("the old epoch's subscription got offset %d of the new epoch (data %s)", f.Params.Offset, f.Params.Data)
		}
		if f.Method == "system" && f.Params.Event == "resync" {
			break
		}
	}
	nothingBefore(t, sub, "the old subscription after resync")
	again := histCall(t, sub, "subscribe", recoverParams("room:r", pos.Epoch, 1))
	if again.Recovered == nil || *again.Recovered || again.Reason != "epoch" || again.Epoch != back.Epoch || again.Offset != back.Offset {
		t.Fatalf("subscribe again after resync: %+v, want recovered false (epoch) at %+v", again, back)
	}
	histCall(t, pub, "publish", `{"topic":"room:r","data":4}`)
	checkConsecutive(t, "after subscribing again", readOffsets(t, sub, "room:r", 1), back.Offset+1)
	c := wstest.Dial(t, p.WS())
	res := histCall(t, c, "subscribe", recoverParams("room:r", pos.Epoch, 1))
	if res.Recovered == nil || *res.Recovered || res.Reason != "epoch" {
		t.Fatalf("recover from the old epoch: %+v", res)
	}
	if n := p.metric("handshake_accepted_total"); n != 4 {
		t.Fatalf("%v handshakes, want the test's 4: the outage made nobody reconnect", n)
	}
}

// Redis stopped and restarted on the same port with its data (an
// append-only file): while it is down, publishing answers
// HISTORY_UNAVAILABLE and nothing reaches a subscriber without an offset;
// once it is back, the subscribers simply go on. Nobody reconnects (no
// handshake after the subscribers'), nobody is told to resync or recover,
// and every message published after Redis returned reaches every
// subscriber once, in order, with offsets that continue the stream's.
func TestHistoryRedisBackWithoutReconnects(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	p := start(t, fleetConfig(r.URL(), historyConfig(10000, "5m", "")))
	const topic = "room:outage"
	subscribers, after := 20, 300
	if raceEnabled {
		subscribers, after = 10, 150
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	type sub struct {
		mu      sync.Mutex
		got     []int
		events  []string // recoveries and resyncs: none expected
		reached chan struct{}
		want    int
	}
	subs := make([]*sub, subscribers)
	for i := range subs {
		s := &sub{}
		opts := client.DefaultOptions()
		opts.OnRecovery = func(topic string, ok bool, reason string) {
			s.mu.Lock()
			s.events = append(s.events, fmt.Sprintf("recovery %s %v %s", topic, ok, reason))
			s.mu.Unlock()
		}
		opts.OnSystem = func(event string, params json.RawMessage) {
			if event != "resync" {
				return // "degraded" and "recovered" tell of the bus: expected
			}
			s.mu.Lock()
			s.events = append(s.events, "system "+event+" "+string(params))
			s.mu.Unlock()
		}
		c, err := client.Dial(ctx, p.WS(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Subscribe(ctx, topic, func(_ string, data json.RawMessage) {
			var n int
			_ = json.Unmarshal(data, &n)
			s.mu.Lock()
			s.got = append(s.got, n)
			if len(s.got) == s.want && s.reached != nil {
				close(s.reached)
				s.reached = nil
			}
			s.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	await := func(n int) {
		t.Helper()
		for i, s := range subs {
			s.mu.Lock()
			if len(s.got) >= n {
				s.mu.Unlock()
				continue
			}
			ch := make(chan struct{})
			s.reached, s.want = ch, n
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				s.mu.Lock()
				t.Fatalf("subscriber %d: %d of %d messages", i, len(s.got), n)
			}
		}
	}
	// A raw subscriber sees the offsets themselves.
	raw := wstest.Dial(t, p.WS())
	pos := histCall(t, raw, "subscribe", fmt.Sprintf(`{"topic":%q}`, topic))
	pub := wstest.Dial(t, p.WS())
	publish := func(n int) wstest.Frame {
		return pub.Call("publish", fmt.Sprintf(`{"topic":%q,"data":%d}`, topic, n))
	}
	const before = 10
	for n := range before {
		wstest.MustOK(t, publish(n))
	}
	await(before)
	checkConsecutive(t, "before", readOffsets(t, raw, topic, before), pos.Offset+1)
	handshakes := p.metric("handshake_accepted_total")

	r.Stop()
	for n := range 5 {
		f := publish(-1 - n)
		if f.Error == nil || f.Error.Code != -32001 || !strings.Contains(string(f.Error.Data), `"HISTORY_UNAVAILABLE"`) {
			t.Fatalf("publish with Redis down: %+v", f)
		}
	}

	r.Restart()
	// The first publish that succeeds is the first published after
	// Redis returned; the failed ones before it were stored nowhere.
	var published []int
	testkit.Eventually(t, 30*time.Second, "a publish to succeed once Redis is back", func() bool {
		return publish(before).Error == nil
	})
	published = append(published, before)
	for n := before + 1; len(published) < after; n++ {
		if f := publish(n); f.Error == nil {
			published = append(published, n)
		}
	}
	await(before + len(published))
	offs := readOffsets(t, raw, topic, len(published))
	checkConsecutive(t, "after Redis returned", offs, pos.Offset+before+1)

	want := make([]int, 0, before+len(published))
	for n := range before {
		want = append(want, n)
	}
	want = append(want, published...)
	for i, s := range subs {
		s.mu.Lock()
		if fmt.Sprint(s.got) != fmt.Sprint(want) {
			t.Fatalf("subscriber %d got %v, want %v", i, s.got, want)
		}
		if len(s.events) > 0 {
			t.Fatalf("subscriber %d was told %v", i, s.events)
		}
		s.mu.Unlock()
	}
	if n := p.metric("handshake_accepted_total"); n != handshakes {
		t.Fatalf("%v handshakes after Redis returned, want none", n-handshakes)
	}
	if n := p.metric(`history_resyncs_total`); n != 0 {
		t.Fatalf("%v resyncs", n)
	}
}

// A recovery storm on the Redis store: many clients come back at once,
// each from its own position and each missing several replay pages; every
// one gets its missed offsets exactly once, in order, then live messages,
// and nobody is cut for a slow reader.
func TestHistoryRecoveryStormOnRedis(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	p := start(t, fleetConfig(r.URL(), historyConfig(2000, "5m", "")))
	clients, missed := 200, 350 // more than three replay pages each
	if raceEnabled {
		clients = 60
	}
	pub := wstest.Dial(t, p.WS())
	pos := histCall(t, pub, "subscribe", `{"topic":"room:storm"}`)
	data := `"` + strings.Repeat("x", 100) + `"`
	for range missed {
		histCall(t, pub, "publish", `{"topic":"room:storm","data":`+data+`}`)
	}
	// Client i last saw offset i mod 50: all of them replay from the
	// store, from different places, at the same time.
	conns := make([]*wstest.Conn, clients)
	for i := range conns {
		conns[i] = wstest.Dial(t, p.WS())
	}
	for i, c := range conns {
		c.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"subscribe","params":%s}`, recoverParams("room:storm", pos.Epoch, uint64(i%50))))
	}
	last := uint64(missed)
	for i, c := range conns {
		f := c.Recv()
		wstest.MustOK(t, f)
		var res histResult
		if err := json.Unmarshal(f.Result, &res); err != nil || res.Recovered == nil || !*res.Recovered || res.Offset != last {
			t.Fatalf("client %d: recover answered %s (%v)", i, f.Result, err)
		}
		since := uint64(i % 50)
		checkConsecutive(t, fmt.Sprintf("client %d", i), readOffsets(t, c, "room:storm", int(last-since)), since+1)
	}
	histCall(t, pub, "publish", `{"topic":"room:storm","data":"live"}`)
	for i, c := range conns {
		checkConsecutive(t, fmt.Sprintf("client %d, live", i), readOffsets(t, c, "room:storm", 1), last+1)
	}
	if v := p.metric("slow_consumer_disconnects_total"); v != 0 {
		t.Fatalf("slow_consumer_disconnects_total = %v", v)
	}
	if v := p.metric(`history_recoveries_total{result="recovered"}`); v != float64(clients) {
		t.Fatalf("recoveries counted %v, want %d", v, clients)
	}
}
