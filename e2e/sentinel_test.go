package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// sentinelFleetConfig: a fleet finding its primary through s's Sentinels,
// with history on room:* and none on live:*.
func sentinelFleetConfig(s *redistest.Sentinel) string {
	return fmt.Sprintf(`redis: {url: %q, sentinel: {addrs: [%s]}}
pressure: {sampleInterval: 100ms}
publishRate: {publishInterval: 200ms, staleAfter: 1s, mode: broadcast}
topics:
  namespaces:
    - {pattern: "room:*", subscribe: [any], publish: [any], history: {size: 100000, ttl: 5m}}
    - {pattern: "live:*", subscribe: [any], publish: [any]}
`, s.URL(), strings.Join(s.Addrs, ", "))
}

// The primary is killed while two instances carry load: each publisher
// on one instance, each subscriber on the other. The fleet follows the
// Sentinels' promotion without a restart or a reconnect; no acknowledged
// message is lost without its subscriber being told (resync or gap, or,
// on a topic without history, degraded while it was in flight: the
// documented limit of the delivery guarantee); nothing is delivered
// twice; every publish answers either an acknowledgement or -32001; and
// the cluster view (rate envelopes) resumes through the promoted replica.
//
// "with its data": the replica had everything (Sentinel's usual case).
// "without its data": the replica is emptied between the primary's death
// and its promotion, the worst case of asynchronous replication; the
// history topic then continues in a new epoch and its subscriber is told
// to resync.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	for _, wipe := range []bool{false, true} {
		name := "with its data"
		if wipe {
			name = "without its data"
		}
		t.Run(name, func(t *testing.T) { sentinelFailover(t, wipe) })
	}
}

// pubLog is what one publisher saw: acknowledged data in order, with the
// history position when there is one, and refusals.
type pubLog struct {
	mu       sync.Mutex
	acked    []int
	epochs   []string
	ackAt    []time.Time   // when the acknowledgement came
	sentAt   []time.Time   // when its publish was sent
	slowest  time.Duration // the longest call
	refused  int
	refusedR map[string]int // by reason
	other    []string       // anything but an ack or a -32001
}

type subLog struct {
	mu      sync.Mutex
	got     map[string][]int // topic -> data in order of arrival
	offsets map[string][]uint64
	events  map[string][]string // topic -> resync / gap
	system  []string            // degraded / recovered
	// For the degraded window of a topic without history: the last
	// live:f data received before "degraded", and when "recovered"
	// arrived.
	lastBeforeDegraded int
	degraded           bool
	recoveredAt        time.Time
}

func sentinelFailover(t *testing.T, wipe bool) {
	leakcheck.Check(t)
	s := redistest.StartSentinel(t)
	a := start(t, sentinelFleetConfig(s))
	b := start(t, sentinelFleetConfig(s))
	topics := []string{"room:f", "live:f"}

	sub := wstest.Dial(t, b.WS())
	for _, tp := range topics {
		wstest.MustOK(t, sub.Call("subscribe", fmt.Sprintf(`{"topic":%q}`, tp)))
	}
	sl := &subLog{got: map[string][]int{}, offsets: map[string][]uint64{}, events: map[string][]string{}}
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		for {
			_, raw, err := sub.WS.Read(context.Background())
			if err != nil {
				return
			}
			var f wstest.Frame
			if json.Unmarshal(raw, &f) != nil {
				continue
			}
			sl.mu.Lock()
			switch {
			case f.Method == "message":
				n, _ := strconv.Atoi(string(f.Params.Data))
				sl.got[f.Params.Topic] = append(sl.got[f.Params.Topic], n)
				sl.offsets[f.Params.Topic] = append(sl.offsets[f.Params.Topic], f.Params.Offset)
			case f.Method == "system" && f.Params.Topic != "":
				sl.events[f.Params.Topic] = append(sl.events[f.Params.Topic], f.Params.Event)
				if f.Params.Event == "resync" {
					// Subscribe again, as a client must: a subscription
					// of the old epoch gets nothing of the new one. What
					// passed meanwhile counts as told (resync).
					sub.TrySend(fmt.Sprintf(`{"jsonrpc":"2.0","id":"again","method":"subscribe","params":{"topic":%q}}`, f.Params.Topic))
				}
			case f.Method == "system":
				sl.system = append(sl.system, f.Params.Event)
				switch f.Params.Event {
				case "degraded":
					if !sl.degraded {
						sl.degraded = true
						if g := sl.got["live:f"]; len(g) > 0 {
							sl.lastBeforeDegraded = g[len(g)-1]
						}
					}
				case "recovered":
					sl.recoveredAt = time.Now()
				}
			}
			sl.mu.Unlock()
		}
	}()

	// One publisher per topic on a, each one call at a time, paced so the
	// load is steady rather than a spin of refusals.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	logs := map[string]*pubLog{}
	var next atomic.Int64
	for _, tp := range topics {
		pl := &pubLog{refusedR: map[string]int{}}
		logs[tp] = pl
		pub := wstest.Dial(t, a.WS())
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				n := int(next.Add(1))
				sent := time.Now()
				f, err := rawCall(pub.WS, "publish", fmt.Sprintf(`{"topic":%q,"data":%d}`, tp, n))
				pl.mu.Lock()
				pl.slowest = max(pl.slowest, time.Since(sent))
				switch {
				case err != nil:
					pl.other = append(pl.other, err.Error())
				case f.Error == nil:
					var pos histResult
					_ = json.Unmarshal(f.Result, &pos)
					pl.acked = append(pl.acked, n)
					pl.epochs = append(pl.epochs, pos.Epoch)
					pl.ackAt = append(pl.ackAt, time.Now())
					pl.sentAt = append(pl.sentAt, sent)
				case f.Error.Code == -32001:
					pl.refused++
					var d struct {
						Reason string `json:"reason"`
					}
					_ = json.Unmarshal(f.Error.Data, &d)
					pl.refusedR[d.Reason]++
				default:
					pl.other = append(pl.other, fmt.Sprintf("%d %s", f.Error.Code, f.Error.Message))
				}
				pl.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	acks := func(tp string) int {
		pl := logs[tp]
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return len(pl.acked)
	}
	testkit.Eventually(t, 30*time.Second, "100 acknowledged publishes per topic before the kill", func() bool {
		return acks(topics[0]) >= 100 && acks(topics[1]) >= 100
	})
	// Counted only now: the server counts a handshake after the 101 is
	// written, so a client can be connected before it is counted; once it
	// has been answered, it has been counted.
	handshakes := a.metric("handshake_accepted_total") + b.metric("handshake_accepted_total")

	ackedBefore := map[string]int{}
	for _, tp := range topics {
		ackedBefore[tp] = acks(tp)
	}
	s.Primary.Stop()
	killedAt := time.Now() // the primary is gone: Stop waited for its exit
	// When the Sentinels name the replica, for the report: how much of
	// the time to follow is the promotion's, how much the fleet's.
	promoted := make(chan time.Duration, 1)
	go func() {
		for {
			if addr, _ := s.PrimaryAddr(); addr == s.Replica.Addr {
				promoted <- time.Since(killedAt)
				return
			}
			select {
			case <-stop:
				promoted <- 0
				return
			case <-time.After(10 * time.Millisecond): // polling processes we do not control
			}
		}
	}()
	if wipe {
		// The replica, no longer fed, forgets everything before the
		// Sentinels promote it.
		for _, cmd := range [][]string{{"CONFIG", "SET", "replica-read-only", "no"}, {"FLUSHALL"}} {
			if r, err := s.Replica.Do(cmd...); err != nil || r != "+OK" {
				t.Fatalf("%v on the replica: %q, %v", cmd, r, err)
			}
		}
	}
	// The fleet has followed once both publishers have an acknowledgement
	// of a publish sent after the kill, and 200 more after that.
	testkit.Eventually(t, 90*time.Second, "publishes acknowledged again after the promotion", func() bool {
		return acks(topics[0]) >= ackedBefore[topics[0]]+200 && acks(topics[1]) >= ackedBefore[topics[1]]+200
	})
	close(stop)
	wg.Wait()
	promotedAfter := <-promoted
	if got, _ := s.PrimaryAddr(); got != s.Replica.Addr {
		t.Fatalf("the Sentinels name %s as primary, want the promoted replica %s", got, s.Replica.Addr)
	}

	// Markers: once each has arrived, everything before it that will
	// ever arrive has.
	marker := -1
	mpub := wstest.Dial(t, a.WS())
	for _, tp := range topics {
		wstest.MustOK(t, mpub.Call("publish", fmt.Sprintf(`{"topic":%q,"data":%d}`, tp, marker)))
	}
	testkit.Eventually(t, 30*time.Second, "the markers to reach the subscriber", func() bool {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		for _, tp := range topics {
			g := sl.got[tp]
			if len(g) == 0 || g[len(g)-1] != marker {
				return false
			}
		}
		return true
	})

	for _, tp := range topics {
		pl := logs[tp]
		pl.mu.Lock()
		sl.mu.Lock()
		delivered := map[int]int{}
		for _, n := range sl.got[tp] {
			delivered[n]++
		}
		// A lost message is reported when the subscriber was told of a
		// gap in the topic (resync, gap), or, on a topic without history,
		// when it was in flight while the subscriber's instance was cut
		// off from Redis, which the subscriber was told (degraded): the
		// message came after the last one received before "degraded" and
		// was sent before "recovered" arrived. Sent, not acknowledged: a
		// publish sent after the subscriber heard "recovered" reached
		// Redis after the subscriber's instance had subscribed again (it
		// says recovered only then), so it must arrive; one sent before
		// may have reached Redis before that, however late its answer.
		// A subscriber never told "recovered" is still told degraded:
		// its instance may be subscribed again (the markers arrive)
		// before its next PING answers and it says so.
		told := len(sl.events[tp]) > 0
		lost, dup, unreported, inDegraded := 0, 0, 0, 0
		for i, n := range pl.acked {
			switch delivered[n] {
			case 0:
				lost++
				switch {
				case told:
				case tp == "live:f" && sl.degraded && n > sl.lastBeforeDegraded && (sl.recoveredAt.IsZero() || pl.sentAt[i].Before(sl.recoveredAt)):
					inDegraded++
				default:
					unreported++
				}
			case 1:
			default:
				dup++
			}
		}
		followed := time.Duration(0)
		for i, at := range pl.ackAt {
			if pl.sentAt[i].After(killedAt) {
				followed = at.Sub(killedAt)
				break
			}
		}
		t.Logf("%s: acked %d (%d before the kill), refused %d %v, lost %d (%d of them while the subscriber was told degraded), unreported %d, delivered twice %d, told %v; Sentinels promoted the replica %v after the kill, the first publish sent after the kill acknowledged %v after it; slowest call %v; subscriber heard %v",
			tp, len(pl.acked), ackedBefore[tp], pl.refused, pl.refusedR, lost, inDegraded, unreported, dup, sl.events[tp],
			promotedAfter.Round(time.Millisecond), followed.Round(time.Millisecond), pl.slowest.Round(time.Millisecond), sl.system)
		if len(pl.other) > 0 {
			t.Errorf("%s: answers that are neither an acknowledgement nor -32001: %v", tp, pl.other)
		}
		if unreported > 0 {
			t.Errorf("%s: %d acknowledged messages never reached the other instance's subscriber, which was not told", tp, unreported)
		}
		if dup > 0 {
			t.Errorf("%s: %d messages delivered twice", tp, dup)
		}
		if tp == "room:f" {
			for _, o := range sl.offsets[tp] {
				if o == 0 {
					t.Errorf("%s: a message without an offset", tp)
					break
				}
			}
			first, last := pl.epochs[0], pl.epochs[len(pl.epochs)-1]
			if wipe && (first == last || !told) {
				t.Errorf("%s: the promoted replica had none of the stream: epochs %s then %s, subscriber told %v; want a new epoch and a resync", tp, first, last, sl.events[tp])
			}
		}
		sl.mu.Unlock()
		pl.mu.Unlock()
	}
	// The cluster view follows too: each instance hears its sibling's
	// rate envelopes again, through the promoted replica.
	for _, p := range []*proc{a, b} {
		heard := p.metric("cluster_publish_rate_received_total")
		p.waitMetric("cluster_publish_rate_received_total", 30*time.Second, func(v float64) bool { return v > heard })
		p.waitMetric("cluster_publish_rate_instances", 30*time.Second, func(v float64) bool { return v == 1 })
	}
	if n := a.metric("handshake_accepted_total") + b.metric("handshake_accepted_total"); n != handshakes+1 {
		t.Errorf("%v handshakes during the fail-over, want only the marker publisher's", n-handshakes)
	}
	sub.WS.CloseNow()
	<-subDone
}

// rawCall is wstest's Call for a background goroutine: it reports errors
// instead of failing the test.
func rawCall(ws *websocket.Conn, method, params string) (wstest.Frame, error) {
	id := strconv.FormatInt(rawCallID.Add(1), 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"r`+id+`","method":"`+method+`","params":`+params+`}`)); err != nil {
		return wstest.Frame{}, err
	}
	for {
		_, raw, err := ws.Read(ctx)
		if err != nil {
			return wstest.Frame{}, err
		}
		var f wstest.Frame
		if err := json.Unmarshal(raw, &f); err != nil {
			return f, err
		}
		if string(f.ID) == `"r`+id+`"` {
			return f, nil
		}
	}
}

var rawCallID atomic.Int64
