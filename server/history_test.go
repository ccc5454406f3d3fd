package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/protocol"
)

// historyOptions keeps history on topics starting with "h:".
func historyOptions(store history.Store, pol history.Policy) Deps {
	return Deps{
		Metrics: metrics.NewDiscard(),
		History: store,
		HistoryPolicy: func(topic string) history.Policy {
			if strings.HasPrefix(topic, "h:") {
				return pol
			}
			return history.Policy{}
		},
	}
}

// memoryStore is a memory store that hands what it stores to *srv, as
// the node wires it (*srv is set before anything is published).
func memoryStore(srv **Server) *history.Memory {
	return testkit.Must(history.NewMemory(history.Config{}, history.MemoryDeps{Deliver: func(topic, epoch string, m history.Message) {
		(*srv).DeliverHistory(topic, epoch, m)
	}}))
}

type position struct {
	Epoch     string `json:"epoch"`
	Offset    uint64 `json:"offset"`
	Recovered *bool  `json:"recovered"`
	Reason    string `json:"reason"`
}

func resultPos(t *testing.T, f wstest.Frame) position {
	t.Helper()
	wstest.MustOK(t, f)
	var p position
	if err := json.Unmarshal(f.Result, &p); err != nil || p.Epoch == "" {
		t.Fatalf("result %s: %v", f.Result, err)
	}
	return p
}

// nextMessages reads n message notifications of topic and returns their
// offsets and data, failing on anything else but system notices.
func nextMessages(t *testing.T, c *wstest.Conn, topic string, n int) (offs []uint64, data []string) {
	t.Helper()
	for len(offs) < n {
		f := c.Recv()
		switch {
		case f.Method == "message" && f.Params.Topic == topic:
			offs = append(offs, f.Params.Offset)
			data = append(data, string(f.Params.Data))
		case f.Method == "system" && f.Params.Event == protocol.EventResync:
			t.Fatalf("resync after %v", offs)
		}
	}
	return offs, data
}

func publishN(t *testing.T, c *wstest.Conn, topic string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		resultPos(t, c.Call("publish", fmt.Sprintf(`{"topic":%q,"data":%d}`, topic, i)))
	}
}

func TestHistoryPublishSubscribeAndRecover(t *testing.T) {
	leakcheck.Check(t)
	var srv *Server
	store := memoryStore(&srv)
	opts := historyOptions(store, history.Policy{Size: 100, TTL: time.Minute})
	s, url := startServer(t, opts)
	srv = s
	pub, sub := wstest.Dial(t, url), wstest.Dial(t, url)

	// An empty topic still has a position.
	p0 := resultPos(t, sub.Call("subscribe", `{"topic":"h:1"}`))
	if p0.Offset != 0 || p0.Recovered != nil {
		t.Fatalf("subscribe to an empty topic: %+v", p0)
	}
	publishN(t, pub, "h:1", 1, 3)
	offs, _ := nextMessages(t, sub, "h:1", 3)
	if fmt.Sprint(offs) != "[1 2 3]" {
		t.Fatalf("live offsets %v", offs)
	}
	sub.WS.CloseNow()

	// Away: 5 more. Back with since: exactly those, then live.
	publishN(t, pub, "h:1", 4, 5)
	back := wstest.Dial(t, url)
	r := resultPos(t, back.Call("subscribe", fmt.Sprintf(`{"topic":"h:1","recover":true,"since":{"epoch":%q,"offset":3}}`, p0.Epoch)))
	if r.Recovered == nil || !*r.Recovered || r.Offset != 8 {
		t.Fatalf("recover: %+v", r)
	}
	publishN(t, pub, "h:1", 9, 1)
	offs, data := nextMessages(t, back, "h:1", 6)
	if fmt.Sprint(offs) != "[4 5 6 7 8 9]" || data[0] != "4" {
		t.Fatalf("recovered then live: %v %v", offs, data)
	}

	// Another epoch, or an offset beyond the last: not trusted.
	for _, since := range []string{`{"epoch":"other","offset":1}`, fmt.Sprintf(`{"epoch":%q,"offset":99}`, p0.Epoch)} {
		c := wstest.Dial(t, url)
		r := resultPos(t, c.Call("subscribe", `{"topic":"h:1","recover":true,"since":`+since+`}`))
		if r.Recovered == nil || *r.Recovered || r.Reason != protocol.RecoverEpoch {
			t.Fatalf("since %s: %+v", since, r)
		}
	}
	if got := testutil.ToFloat64(s.m.HistoryRecoveries.WithLabelValues(metrics.RecoveryEpoch)); got != 2 {
		t.Fatalf("epoch recoveries counted %v", got)
	}

	// The history method.
	h := pub.Call("history", `{"topic":"h:1","limit":2}`)
	wstest.MustOK(t, h)
	if !strings.Contains(string(h.Result), `"messages":[{"offset":8,"data":8},{"offset":9,"data":9}]`) {
		t.Fatalf("history: %s", h.Result)
	}
	if f := pub.Call("history", `{"topic":"plain"}`); f.Error == nil || f.Error.Code != protocol.CodeInvalidParams {
		t.Fatalf("history of a plain topic: %+v", f)
	}

	// Idempotent publish: the same position, delivered once.
	a := resultPos(t, pub.Call("publish", `{"topic":"h:1","data":"k","idempotencyKey":"k1"}`))
	b := resultPos(t, pub.Call("publish", `{"topic":"h:1","data":"k","idempotencyKey":"k1"}`))
	if a != b || a.Offset != 10 {
		t.Fatalf("idempotent: %+v then %+v", a, b)
	}
	publishN(t, pub, "h:1", 11, 1)
	offs, _ = nextMessages(t, back, "h:1", 2)
	if fmt.Sprint(offs) != "[10 11]" {
		t.Fatalf("after an idempotent repeat: %v", offs)
	}
}

func TestHistoryTrimmedAndTooMany(t *testing.T) {
	leakcheck.Check(t)
	var srv *Server
	store := memoryStore(&srv)
	opts := historyOptions(store, history.Policy{Size: 3, TTL: time.Minute})
	opts.HistoryConfig.MaxReplay = 5
	srv, url := startServer(t, opts)
	pub := wstest.Dial(t, url)
	p := resultPos(t, pub.Call("subscribe", `{"topic":"h:t"}`))
	publishN(t, pub, "h:t", 1, 4)
	c := wstest.Dial(t, url)
	r := resultPos(t, c.Call("subscribe", fmt.Sprintf(`{"topic":"h:t","recover":true,"since":{"epoch":%q,"offset":0}}`, p.Epoch)))
	if *r.Recovered || r.Reason != protocol.RecoverTrimmed || r.Offset != 4 {
		t.Fatalf("past size: %+v", r)
	}
	publishN(t, pub, "h:t", 5, 6)
	if offs, _ := nextMessages(t, c, "h:t", 6); offs[0] != 5 {
		t.Fatalf("live after trimmed: %v", offs)
	}
	d := wstest.Dial(t, url)
	r = resultPos(t, d.Call("subscribe", fmt.Sprintf(`{"topic":"h:t","recover":true,"since":{"epoch":%q,"offset":2}}`, p.Epoch)))
	if *r.Recovered || r.Reason != protocol.RecoverTooMany {
		t.Fatalf("past maxReplay: %+v", r)
	}
}

// A replay much larger than the send queue is paced by it: the client is
// never closed 1013 for it, and gets every message, in order.
func TestHistoryReplayIsPacedBySendQueue(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	var srv *Server
	store := memoryStore(&srv)
	opts := historyOptions(store, history.Policy{Size: 5000, TTL: time.Minute})
	s, url := startServer(t, opts, Config{SendQueueBytes: 16 << 10})
	srv = s
	pub := wstest.Dial(t, url)
	p := resultPos(t, pub.Call("subscribe", `{"topic":"h:big"}`))
	data := `"` + strings.Repeat("x", 1000) + `"`
	for i := range 2000 {
		pub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"h:big","data":%s,"idempotencyKey":"%d"}}`, data, i))
	}
	resultPos(t, pub.Call("publish", `{"topic":"h:big","data":0}`))
	c := wstest.Dial(t, url)
	r := resultPos(t, c.Call("subscribe", fmt.Sprintf(`{"topic":"h:big","recover":true,"since":{"epoch":%q,"offset":0}}`, p.Epoch)))
	if !*r.Recovered || r.Offset != 2001 {
		t.Fatalf("recover: %+v", r)
	}
	offs, _ := nextMessages(t, c, "h:big", 2001)
	for i, o := range offs {
		if o != uint64(i+1) {
			t.Fatalf("replayed %d at %d", o, i)
		}
	}
	if n := testutil.ToFloat64(s.m.SlowConsumerDisconnects); n != 0 {
		t.Fatalf("%v slow-consumer closes", n)
	}
}

// failingStore fails every call: Redis down.
type failingStore struct{}

var errDown = errors.New("down")

func (failingStore) Publish(context.Context, history.Publish) (history.Position, bool, error) {
	return history.Position{}, false, errDown
}

func (failingStore) Read(context.Context, string, uint64, int, history.Policy) (history.Position, []history.Message, error) {
	return history.Position{}, nil, errDown
}

func TestHistoryUnavailable(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, historyOptions(failingStore{}, history.Policy{Size: 10, TTL: time.Minute}))
	c := wstest.Dial(t, url)
	for _, call := range [][2]string{
		{"publish", `{"topic":"h:x","data":1}`},
		{"subscribe", `{"topic":"h:x","recover":true,"since":{"epoch":"e","offset":1}}`},
	} {
		f := c.Call(call[0], call[1])
		if f.Error == nil || f.Error.Code != protocol.CodeOverloaded || !strings.Contains(string(f.Error.Data), protocol.ReasonHistoryUnavailable) || !strings.Contains(string(f.Error.Data), "retryAfterMs") {
			t.Fatalf("%s with the store down: %+v", call[0], f)
		}
	}
	// Not left subscribed: a plain topic still works.
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"plain"}`))
	wstest.MustOK(t, wstest.Dial(t, url).Call("publish", `{"topic":"plain","data":1}`))
	if got := c.ExpectMessage("plain"); got != "1" {
		t.Fatal(got)
	}
}

// A message the bus lost is filled from the store, once, for every local
// subscriber; a lost last message is found by the periodic check.
func TestHistoryFillsGapsFromTheStore(t *testing.T) {
	leakcheck.Check(t)
	var srv *Server
	store := testkit.Must(history.NewMemory(history.Config{}, history.MemoryDeps{Deliver: func(topic, epoch string, m history.Message) {
		if m.Offset == 3 || m.Offset == 6 {
			return // lost on the way
		}
		srv.DeliverHistory(topic, epoch, m)
	}}))
	opts := historyOptions(store, history.Policy{Size: 100, TTL: time.Minute})
	opts.HistoryCheckInterval = 20 * time.Millisecond
	s, url := startServer(t, opts)
	srv = s
	a, b := wstest.Dial(t, url), wstest.Dial(t, url)
	resultPos(t, a.Call("subscribe", `{"topic":"h:g"}`))
	resultPos(t, b.Call("subscribe", `{"topic":"h:g"}`))
	pub := wstest.Dial(t, url)
	publishN(t, pub, "h:g", 1, 6)
	for _, c := range []*wstest.Conn{a, b} {
		if offs, _ := nextMessages(t, c, "h:g", 6); fmt.Sprint(offs) != "[1 2 3 4 5 6]" {
			t.Fatalf("got %v", offs)
		}
	}
	if n := testutil.ToFloat64(s.m.HistoryGapFills.WithLabelValues(metrics.GapFilled)); n != 2 {
		t.Fatalf("%v gap fills, want 2 (one per gap, for both subscribers)", n)
	}
}

// A recovery that is not trusted (another epoch, or an offset beyond the
// last) goes live from the answer's offset: every message published after
// it arrives, even those whose offsets are at or below the client's stale
// since (a new epoch counts from 1 again).
func TestUntrustedRecoveryIsLiveFromTheAnswer(t *testing.T) {
	leakcheck.Check(t)
	var srv *Server
	store := memoryStore(&srv)
	opts := historyOptions(store, history.Policy{Size: 100, TTL: time.Minute})
	srv, url := startServer(t, opts)
	pub := wstest.Dial(t, url)
	p0 := resultPos(t, pub.Call("subscribe", `{"topic":"h:e"}`))
	publishN(t, pub, "h:e", 1, 2)
	for i, since := range []string{
		`{"epoch":"deadbeef","offset":5}`,                // another epoch, above the last offset
		fmt.Sprintf(`{"epoch":%q,"offset":9}`, p0.Epoch), // this epoch, above the last offset
	} {
		topic := fmt.Sprintf("h:e%d", i)
		publishN(t, pub, topic, 1, 2)
		c := wstest.Dial(t, url)
		r := resultPos(t, c.Call("subscribe", `{"topic":"`+topic+`","recover":true,"since":`+since+`}`))
		if r.Recovered == nil || *r.Recovered || r.Reason != protocol.RecoverEpoch || r.Offset != 2 {
			t.Fatalf("since %s: %+v", since, r)
		}
		publishN(t, pub, topic, 3, 4)
		if offs, _ := nextMessages(t, c, topic, 4); fmt.Sprint(offs) != "[3 4 5 6]" {
			t.Fatalf("since %s: live after the answer %v", since, offs)
		}
	}
}

// downStore is a memory store that fails every call while down is set:
// Redis going away and coming back.
type downStore struct {
	*history.Memory
	down atomic.Bool
}

func (d *downStore) Publish(ctx context.Context, p history.Publish) (history.Position, bool, error) {
	if d.down.Load() {
		return history.Position{}, false, errDown
	}
	return d.Memory.Publish(ctx, p)
}

func (d *downStore) Read(ctx context.Context, topic string, after uint64, limit int, pol history.Policy) (history.Position, []history.Message, error) {
	if d.down.Load() {
		return history.Position{}, nil, errDown
	}
	return d.Memory.Read(ctx, topic, after, limit, pol)
}

// A subscribe refused because the store is down leaves a subscription the
// client already had as it was: once the store is back, its messages
// still arrive, in order.
func TestRefusedResubscribeKeepsTheSubscription(t *testing.T) {
	leakcheck.Check(t)
	var s *Server
	mem := memoryStore(&s)
	s = mustNew(t, historyOptions(mem, history.Policy{Size: 10, TTL: time.Minute}))
	// Wrapped once the server knows the memory store delivers in the
	// publisher's call, before anything runs.
	store := &downStore{Memory: mem}
	s.hist.store = store
	url := serve(t, s)
	pub, sub := wstest.Dial(t, url), wstest.Dial(t, url)
	p0 := resultPos(t, sub.Call("subscribe", `{"topic":"h:x"}`))
	publishN(t, pub, "h:x", 1, 1)
	nextMessages(t, sub, "h:x", 1)

	store.down.Store(true)
	for _, params := range []string{
		`{"topic":"h:x"}`,
		fmt.Sprintf(`{"topic":"h:x","recover":true,"since":{"epoch":%q,"offset":1}}`, p0.Epoch),
	} {
		f := sub.Call("subscribe", params)
		if f.Error == nil || !strings.Contains(string(f.Error.Data), protocol.ReasonHistoryUnavailable) {
			t.Fatalf("subscribe %s with the store down: %+v", params, f)
		}
	}
	store.down.Store(false)

	publishN(t, pub, "h:x", 2, 2)
	if offs, _ := nextMessages(t, sub, "h:x", 2); fmt.Sprint(offs) != "[2 3]" {
		t.Fatalf("after the store came back: offsets %v", offs)
	}
}

// swapStore is a memory store that can be replaced by an empty one: Redis
// coming back without its data, every topic in a new epoch.
type swapStore struct {
	mu      sync.Mutex
	cur     *history.Memory
	deliver func(topic, epoch string, m history.Message)
}

func (s *swapStore) get() *history.Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *swapStore) swap() {
	m := testkit.Must(history.NewMemory(history.Config{}, history.MemoryDeps{Deliver: s.deliver}))
	s.mu.Lock()
	s.cur = m
	s.mu.Unlock()
}

func (s *swapStore) Publish(ctx context.Context, p history.Publish) (history.Position, bool, error) {
	return s.get().Publish(ctx, p)
}

func (s *swapStore) Read(ctx context.Context, topic string, after uint64, limit int, pol history.Policy) (history.Position, []history.Message, error) {
	return s.get().Read(ctx, topic, after, limit, pol)
}

// A new epoch never reaches a subscription of the old one: between the
// resync and the client's subscribe again, the subscription gets nothing
// of the new stream (whose offsets start from 1 again); the subscribe
// again answers recovered false, reason epoch, and is live from there.
func TestNewEpochNeverReachesAnOldSubscription(t *testing.T) {
	leakcheck.Check(t)
	var srv *Server
	store := &swapStore{deliver: func(topic, epoch string, m history.Message) {
		srv.hist.deliverAt(topic, m.Data, epoch, m.Offset, nil)
	}}
	store.swap()
	srv, url := startServer(t, historyOptions(store, history.Policy{Size: 100, TTL: time.Minute}))
	a, pub := wstest.Dial(t, url), wstest.Dial(t, url)
	old := resultPos(t, a.Call("subscribe", `{"topic":"h:x"}`))
	publishN(t, pub, "h:x", 1, 2)
	if offs, _ := nextMessages(t, a, "h:x", 2); fmt.Sprint(offs) != "[1 2]" {
		t.Fatalf("before: %v", offs)
	}

	store.swap()
	publishN(t, pub, "h:x", 3, 3) // offsets 1, 2, 3 of the new epoch
	a.Send(`{"jsonrpc":"2.0","id":"fence","method":"unsubscribe","params":{"topic":"fence"}}`)
	resyncs := 0
	for {
		f := a.Recv()
		if string(f.ID) == `"fence"` {
			break
		}
		switch {
		case f.Method == "system" && f.Params.Event == protocol.EventResync:
			resyncs++
		case f.Method == "message":
			t.Fatalf("the old epoch's subscription got offset %d of the new epoch (data %s)", f.Params.Offset, f.Params.Data)
		}
	}
	if resyncs != 1 {
		t.Fatalf("%d resyncs before the fence, want 1", resyncs)
	}

	r := resultPos(t, a.Call("subscribe", fmt.Sprintf(`{"topic":"h:x","recover":true,"since":{"epoch":%q,"offset":2}}`, old.Epoch)))
	if r.Recovered == nil || *r.Recovered || r.Reason != protocol.RecoverEpoch || r.Epoch == old.Epoch || r.Offset != 3 {
		t.Fatalf("subscribe again: %+v", r)
	}
	publishN(t, pub, "h:x", 6, 1)
	if offs, data := nextMessages(t, a, "h:x", 1); fmt.Sprint(offs) != "[4]" || data[0] != "6" {
		t.Fatalf("after subscribing again: %v %v", offs, data)
	}
}
