package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/wstest"
)

// Acknowledged means delivered: publishers on instance A saturate a bus
// whose send queue holds one message and never waits for room, so many
// publishes are shed (-32001 BUS) while others are acknowledged;
// subscribers on instance B get every acknowledged publish, in order per
// publisher, and never one that was shed. A counts exactly the sheds its
// publishers were told of, and B drops nothing.
func TestBusDeliversEveryAcknowledgedPublish(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cluster bool
	}{
		{"single", false},
		{"sharded-cluster", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leakcheck.Check(t)
			env := []string{"RTSERVER_REDIS_PUBLISHQUEUE=1", "RTSERVER_REDIS_PUBLISHWAIT=-1ms"}
			var url string
			if tt.cluster {
				url = clusterURL(redistest.StartCluster(t))
				env = append(env, "RTSERVER_REDIS_BUS=sharded")
			} else {
				url = redistest.Start(t).URL()
			}
			a, b := start(t, fleetConfig(url, ""), env...), start(t, fleetConfig(url, ""), env...)
			saturate(t, a, b)
		})
	}
}

// publishOutcome is what one publisher was told.
type publishOutcome struct {
	acked []int        // message numbers answered {}
	shed  map[int]bool // message numbers answered -32001 BUS
}

// saturate runs the load of TestBusDeliversEveryAcknowledgedPublish.
func saturate(t *testing.T, a, b *proc) {
	const (
		publishers = 16
		perPub     = 300
		window     = 32 // publishes in flight per publisher
		subsPer    = 2  // subscribers per topic, on b
	)
	topic := func(p int) string { return "load-" + strconv.Itoa(p) }
	subs := make([][]*wstest.Conn, publishers)
	for p := range publishers {
		for range subsPer {
			c := wstest.Dial(t, b.WS())
			wstest.MustOK(t, c.Call("subscribe", `{"topic":"`+topic(p)+`"}`))
			subs[p] = append(subs[p], c)
		}
	}

	outcomes := make([]publishOutcome, publishers)
	var wg sync.WaitGroup
	for p := range publishers {
		c := wstest.Dial(t, a.WS())
		wg.Go(func() { outcomes[p] = publishWindowed(t, c, topic(p), perPub, window) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	shed := 0
	for p := range publishers {
		shed += len(outcomes[p].shed)
		for _, c := range subs[p] {
			wg.Go(func() { expectExactly(t, c, topic(p), outcomes[p]) })
		}
	}
	wg.Wait()
	t.Logf("%d publishes, %d shed", publishers*perPub, shed)
	if shed == 0 {
		t.Error("no publish was shed: the load did not saturate the bus")
	}
	if got := a.metric(`bus_messages_dropped_total{reason="queue_full"}`); int(got) != shed {
		t.Errorf("A counted %v sheds, its publishers were told of %d", got, shed)
	}
	if got := b.metric(`bus_messages_dropped_total{reason="slow_receiver"}`); got != 0 {
		t.Errorf("B dropped %v received messages", got)
	}
}

// publishWindowed publishes n numbered messages on topic with up to window
// in flight, and returns what each was answered.
func publishWindowed(t *testing.T, c *wstest.Conn, topic string, n, window int) publishOutcome {
	out := publishOutcome{shed: map[int]bool{}}
	slots := make(chan struct{}, window)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			b, err := c.Read()
			if err != nil {
				t.Errorf("%s: read: %v", topic, err)
				return
			}
			<-slots
			var f struct {
				ID    int `json:"id"`
				Error *struct {
					Code int `json:"code"`
					Data struct {
						Reason       string `json:"reason"`
						RetryAfterMs int64  `json:"retryAfterMs"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &f); err != nil {
				t.Errorf("%s: answer %s: %v", topic, b, err)
				return
			}
			switch {
			case f.Error == nil:
				out.acked = append(out.acked, f.ID)
			case f.Error.Code == -32001 && f.Error.Data.Reason == "BUS" && f.Error.Data.RetryAfterMs > 0:
				out.shed[f.ID] = true
			default:
				t.Errorf("%s: answer %s, want {} or -32001 BUS with a retry hint", topic, b)
				return
			}
		}
	}()
	for i := range n {
		slots <- struct{}{}
		if !c.TrySend(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"publish","params":{"topic":%q,"data":%d}}`, i, topic, i)) {
			t.Errorf("%s: send failed", topic)
			break
		}
	}
	<-done
	return out
}

// expectExactly reads topic's messages on c until every acknowledged one
// has arrived, failing on a gap, on a shed message, or on one out of
// order.
func expectExactly(t *testing.T, c *wstest.Conn, topic string, o publishOutcome) {
	for _, want := range o.acked {
		b, err := c.Read()
		if err != nil {
			t.Errorf("%s: waiting for message %d: %v", topic, want, err)
			return
		}
		var f wstest.Frame
		if err := json.Unmarshal(b, &f); err != nil || f.Method != "message" || f.Params.Topic != topic {
			t.Errorf("%s: got %s, want message %d", topic, b, want)
			return
		}
		got, _ := strconv.Atoi(string(f.Params.Data))
		if got != want {
			t.Errorf("%s: got message %d (shed: %v), want %d: acknowledged messages in publish order", topic, got, o.shed[got], want)
			return
		}
	}
}

// A control message acts once, fleet-wide and across restarts: a
// disconnect captured off Redis and published again is refused by the
// instance that acted on it and by one started after it was sent, and
// the user's new connections stay.
func TestCapturedDisconnectIsNotReplayed(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := signedFleetConfig(r.URL(), apiConfig)
	a, b := start(t, cfg), start(t, cfg)

	spy := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer spy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := spy.Subscribe(ctx, "rt:bus")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	alice := dialUser(t, b, "alice")
	wstest.MustOK(t, alice.Call("subscribe", `{"topic":"room"}`))
	apiOK(t, "http://"+a.Addr, "disconnect", `{"user":"alice"}`)
	if code, reason := alice.CloseStatus(); code != 1008 || reason != "disconnected" {
		t.Fatalf("alice closed with %d %q, want 1008 disconnected", code, reason)
	}
	var captured string
	for captured == "" {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Payload[0] == 0x03 { // a control envelope (docs/cluster.md)
			captured = m.Payload
		}
	}

	c := start(t, cfg) // started after the disconnect was sent
	procs := []*proc{b, c}
	conns := make([]*wstest.Conn, len(procs))
	before := make([]float64, len(procs))
	for i, p := range procs {
		conns[i] = dialUser(t, p, "alice")
		wstest.MustOK(t, conns[i].Call("subscribe", `{"topic":"room"}`))
		before[i] = p.metric(`bus_messages_dropped_total{reason="malformed"}`)
	}
	if err := spy.Publish(ctx, "rt:bus", captured).Err(); err != nil {
		t.Fatal(err)
	}
	for i, p := range procs {
		p.waitMetric(`bus_messages_dropped_total{reason="malformed"}`, 10*time.Second, func(v float64) bool { return v == before[i]+1 })
		wstest.MustOK(t, conns[i].Call("subscribe", `{"topic":"still-here"}`))
	}
}
