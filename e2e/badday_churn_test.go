package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// churnConfig: churn:* topics send join/leave diffs (without keeping
// entries, so a change costs no store write), coalesced for only 10ms, so
// nearly every subscribe and unsubscribe is a diff of its own.
const churnConfig = `topics:
  namespaces:
    - {pattern: "churn:*", subscribe: [any], publish: [any], joinLeave: true}
presence: {diffInterval: 10ms}
limits: {maxSubscriptionsPerConn: 1024}
`

// churn subscribes c to churn:<prefix>0..n-1 and unsubscribes them again,
// over and over, 64 requests in flight, until stop is closed; changes
// counts the answered requests.
func churn(c *wstest.Conn, prefix string, n int, stop <-chan struct{}, changes *atomic.Int64) {
	const window = 64
	id := 0
	for round := 0; ; round++ {
		method := "subscribe"
		if round%2 == 1 {
			method = "unsubscribe"
		}
		for i := 0; i < n; i += window {
			select {
			case <-stop:
				return
			default:
			}
			sent := 0
			for j := i; j < min(n, i+window); j++ {
				id++
				if !c.TrySend(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"topic":"churn:%s%d"}}`, id, method, prefix, j)) {
					return
				}
				sent++
			}
			for sent > 0 {
				b, err := c.Read()
				if err != nil {
					return
				}
				var f struct {
					ID json.RawMessage `json:"id"`
				}
				if json.Unmarshal(b, &f) == nil && f.ID != nil {
					sent--
					changes.Add(1)
				}
			}
		}
	}
}

// directChurn publishes presence diffs (joins and leaves of made-up
// clients) on the given topics as signed notices of a made-up instance,
// straight to the fleet's bus channel, at about rate per second (as the
// machine allows), until stop is closed; sent counts them.
func directChurn(t *testing.T, redisURL, secret string, topics []string, rate int, stop <-chan struct{}, sent *atomic.Int64) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Error(err)
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	// Paced by the clock, not by ticks (a loaded machine drops ticks): each
	// round sends what the rate owes since the start, at most 0.1 s of it.
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	ctx := context.Background()
	began := time.Now()
	for i := 0; ; {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		owed := int(time.Since(began).Seconds()*float64(rate)) - i
		per := min(owed, max(1, rate/10))
		if per <= 0 {
			continue
		}
		p := c.Pipeline()
		for range per {
			kind := "joins"
			if (i/len(topics))%2 == 1 {
				kind = "leaves"
			}
			data := fmt.Sprintf(`{%q:[{"client":"gen-%d","user":"gen"}]}`, kind, i%len(topics))
			p.Publish(ctx, "rt:bus", bus.NoticeEnvelope("churngen", "__presence:"+topics[i%len(topics)], []byte(data), []byte(secret)))
			i++
		}
		if _, err := p.Exec(ctx); err != nil {
			return // Redis stopped with the test
		}
		sent.Add(int64(per))
	}
}

// TestDisconnectUnderPresenceChurn: while connections on both instances
// of a signed fleet churn joinLeave topics (every change a presence diff
// to the other instance), the server API's disconnect on A closes the
// user's connection on B, every time, and B refuses no control message
// as replayed. Presence diffs travel as notices, apart from the numbered
// control lane (docs/cluster.md). The time from the API call to the
// close, and the diff rate B received, are logged, not asserted.
func TestDisconnectUnderPresenceChurn(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := signedFleetConfig(r.URL(), apiConfig+churnConfig)
	a, b := start(t, cfg), start(t, cfg)
	base := "http://" + a.Addr
	testkit.Eventually(t, 10*time.Second, "two instances in info", func() bool {
		return strings.Contains(string(apiOK(t, base, "info", `{}`)), `"instances":2`)
	})

	// A watcher on B of every churned topic, so that B delivers each diff
	// it receives.
	const topics = 512
	watcher := dialUser(t, b, "watcher")
	for i := range topics {
		for _, side := range []string{"a", "b"} {
			wstest.MustOK(t, watcher.Call("subscribe", fmt.Sprintf(`{"topic":"churn:%s%d"}`, side, i)))
		}
	}
	go func() { // drain its notifications
		for {
			if _, err := watcher.Read(); err != nil {
				return
			}
		}
	}()

	disconnect := func(user string) time.Duration {
		victim := dialUser(t, b, user)
		wstest.MustOK(t, victim.Call("subscribe", `{"topic":"room"}`))
		began := time.Now()
		apiOK(t, base, "disconnect", fmt.Sprintf(`{"user":%q}`, user))
		if code, reason := victim.CloseStatus(); code != websocket.StatusPolicyViolation || reason != "disconnected" {
			t.Fatalf("%s on B closed with %d %q, want 1008 disconnected", user, code, reason)
		}
		return time.Since(began)
	}
	quiet := disconnect("quiet")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var changes atomic.Int64
	for i, p := range []*proc{a, a, a, a, b, b, b, b} {
		c := dialUser(t, p, fmt.Sprint("churner", i))
		side := "a"
		if p == b {
			side = "b"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			churn(c, fmt.Sprint(side, i%4), topics/4, stop, &changes)
		}()
	}
	var direct atomic.Int64
	// Diffs published straight to Redis besides the WebSocket churn
	// (which the machine bounds to ~10k changes/s): 2,000/s in the suite,
	// BADDAY_CHURN_RATE=20000 for the measurement (scripts/bad-days.sh
	// churn). Nothing is asserted of the rate.
	if rate := envCount(t, "BADDAY_CHURN_RATE", 2000, 0); rate > 0 {
		var watched []string
		for i := range topics {
			watched = append(watched, fmt.Sprintf("churn:a%d", i), fmt.Sprintf("churn:b%d", i))
		}
		wg.Go(func() { directChurn(t, r.URL(), "s3cret", watched, rate, stop, &direct) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// The churn is on once B has received a few thousand diffs.
	from := b.metric("bus_messages_received_total")
	b.waitMetric("bus_messages_received_total", 30*time.Second, func(v float64) bool { return v-from > 2000 })
	began, recv0, changes0, direct0 := time.Now(), b.metric("bus_messages_received_total"), changes.Load(), direct.Load()
	var times []time.Duration
	for i := range 5 {
		times = append(times, disconnect(fmt.Sprint("victim", i)))
	}
	elapsed := time.Since(began).Seconds()
	rate := (b.metric("bus_messages_received_total") - recv0) / elapsed
	t.Logf("disconnect A -> B: quiet %v; under churn %v (B received %.0f bus messages/s: diffs from A and %.0f/s published straight to Redis; %.0f WebSocket changes/s fleet-wide)",
		quiet.Round(time.Millisecond), roundAll(times), rate, float64(direct.Load()-direct0)/elapsed, float64(changes.Load()-changes0)/elapsed)
	for _, p := range []*proc{a, b} {
		if v := p.metric(`bus_messages_dropped_total{reason="malformed"}`); v != 0 {
			t.Errorf("%s dropped %v envelopes as malformed or replayed", p.Addr, v)
		}
	}
	if strings.Contains(b.log.String(), "replayed") {
		t.Error("B refused a control message as replayed")
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
