package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
)

// waitLimit only stops a broken test from hanging; every wait is for a
// condition, never for time to pass.
const waitLimit = 30 * time.Second

type got struct{ topic, data string }

// recorder is a Receiver that keeps everything it is given.
type recorder struct {
	mu     sync.Mutex
	msgs   []got
	states []bool
	kick   chan struct{}
}

func newRecorder() *recorder { return &recorder{kick: make(chan struct{}, 1)} }

func (r *recorder) Deliver(topic string, data []byte) {
	r.mu.Lock()
	r.msgs = append(r.msgs, got{topic, string(data)})
	r.mu.Unlock()
	r.poke()
}

// DeliverControl records a control message as a message whose topic is
// "control " + key, so tests see its order among data messages.
func (r *recorder) DeliverControl(key string, data []byte) { r.Deliver("control "+key, data) }

// DeliverNotice records a notice as a message whose topic is "notice " +
// key.
func (r *recorder) DeliverNotice(key string, data []byte) { r.Deliver("notice "+key, data) }

// Gap records a gap as a message whose topic is "gap " + topic.
func (r *recorder) Gap(topic string) { r.Deliver("gap "+topic, nil) }

func (r *recorder) BusState(degraded bool) {
	r.mu.Lock()
	r.states = append(r.states, degraded)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() ([]got, []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]got(nil), r.msgs...), append([]bool(nil), r.states...)
}

// await waits until cond holds over what r has recorded.
func (r *recorder) await(t testing.TB, what string, cond func(msgs []got, states []bool) bool) {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		if cond(r.snapshot()) {
			return
		}
		select {
		case <-r.kick:
		case <-limit.C:
			msgs, states := r.snapshot()
			t.Fatalf("waiting for %s: %d messages, states %v", what, len(msgs), states)
		}
	}
}

func (r *recorder) awaitMsgs(t testing.TB, n int) []got {
	t.Helper()
	r.await(t, fmt.Sprintf("%d messages", n), func(m []got, _ []bool) bool { return len(m) >= n })
	m, _ := r.snapshot()
	return m
}

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// newClusterClient is newClient for a Redis Cluster.
func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	return cc
}

func newMetrics() *metrics.Metrics { return metrics.NewDiscard() }

func dropped(m *metrics.Metrics, reason string) float64 {
	return testutil.ToFloat64(m.BusDropped.WithLabelValues(reason))
}

// testOptions are fast-ticking options for tests.
func testOptions(c redis.UniversalClient, id string) RedisOptions {
	return RedisOptions{
		Client: c, InstanceID: id, ChannelPrefix: "test:", Metrics: newMetrics(),
		PingInterval: 50 * time.Millisecond, PingTimeout: 2 * time.Second,
		DeliverQueueSize: 1 << 15, PublishQueue: 1 << 15,
	}
}

func startRedis(t testing.TB, o RedisOptions) (*Redis, *recorder) {
	t.Helper()
	b, err := NewRedis(o)
	return started(t, b, err)
}

// started starts a bus just built (failing on err) with a fresh recorder,
// and closes it when the test ends.
func started[B Bus](t testing.TB, b B, err error) (B, *recorder) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := b.Start(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, r
}

// noBusGoroutines fails when any goroutine of this package's buses is
// still running. Close has waited for them all, but a goroutine that has
// signalled its WaitGroup may still be returning: give those a moment.
func noBusGoroutines(t testing.TB) {
	t.Helper()
	var left []string
	for range 1000 {
		left = left[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "rtserver/bus.(*engine)") || strings.Contains(g, "rtserver/bus.(*Subscription)") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}
		time.Sleep(time.Millisecond) // let exiting goroutines finish returning
	}
	t.Errorf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
}

func TestRedisDeliversInOrderWithoutEcho(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	a, ra := startRedis(t, testOptions(c, "a"))
	b, rb := startRedis(t, testOptions(c, "b"))
	if a.Channel() != "test:bus" {
		t.Errorf("channel %q, want test:bus", a.Channel())
	}

	const n = 2000
	for i := range n {
		for {
			err := a.Publish("room", fmt.Appendf(nil, `{"n":%d}`, i))
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			runtime.Gosched() // the queue is sized for the test; this only guards
		}
	}
	msgs := rb.awaitMsgs(t, n)
	for i, m := range msgs {
		if want := fmt.Sprintf(`{"n":%d}`, i); m.topic != "room" || m.data != want {
			t.Fatalf("message %d: got %s %s, want room %s", i, m.topic, m.data, want)
		}
	}

	// Redis sends a channel's messages in order, so once a's subscription
	// has this fence from b, it has had every echo of its own.
	if err := b.Publish("fence", []byte(`"end"`)); err != nil {
		t.Fatal(err)
	}
	got := ra.awaitMsgs(t, 1)
	if len(got) != 1 || got[0] != (struct{ topic, data string }{"fence", `"end"`}) {
		t.Errorf("a received %v, want only the fence", got)
	}
	if msgs, _ := rb.snapshot(); len(msgs) != n {
		t.Errorf("b received %d messages, want %d (its own fence echoed?)", len(msgs), n)
	}
	if v := testutil.ToFloat64(a.e.m.BusPublished); v != n {
		t.Errorf("a published %v, want %d", v, n)
	}
	if v := testutil.ToFloat64(b.e.m.BusReceived); v != n {
		t.Errorf("b received counter %v, want %d", v, n)
	}
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

func TestRedisDropsHostileEnvelopes(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	a, _ := startRedis(t, testOptions(c, "a"))
	ob := testOptions(c, "b")
	ob.MaxEnvelopeBytes = 1024
	b, rb := startRedis(t, ob)

	env := func(inst, topic, data string) string {
		return string(appendEnvelope(nil, inst, topic, []byte(data)))
	}
	tests := []struct {
		name    string
		payload string
		reason  string
	}{
		{"garbage", "hello, world", DropMalformed},
		{"empty", "", DropMalformed},
		{"json envelope", `{"i":"x","t":"room","d":1}`, DropMalformed},
		{"truncated header", env("x", "room", "1")[:4], DropMalformed},
		{"instance too long", env(strings.Repeat("x", MaxInstanceIDLen+1), "room", "1"), DropMalformed},
		{"oversize", env("x", "room", `"`+strings.Repeat("a", 1100)+`"`), DropOversize},
		{"bad topic", env("x", "room 1", "1"), DropBadTopic},
		{"empty topic", env("x", "", "1"), DropBadTopic},
		{"reserved topic", env("x", "__system", "1"), DropBadTopic},
		{"invalid json", env("x", "room", `{"a":`), DropMalformed},
		{"no data", env("x", "room", ""), DropMalformed},
		{"two values", env("x", "room", "1 2"), DropMalformed},
	}
	want := map[string]float64{}
	for _, tt := range tests {
		if err := c.Publish(context.Background(), b.Channel(), tt.payload).Err(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		want[tt.reason]++
	}
	// Valid traffic still flows. (Receive workers check in parallel, so
	// the drops are awaited, not assumed done.)
	if err := a.Publish("room", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{DropMalformed, DropOversize, DropBadTopic} {
		testkit.Eventually(t, waitLimit, "dropped{"+reason+"}", func() bool { return dropped(b.e.m, reason) == want[reason] })
	}
	msgs := rb.awaitMsgs(t, 1)
	if len(msgs) != 1 || msgs[0].data != `{"ok":true}` {
		t.Errorf("delivered %v, want only the valid message", msgs)
	}
	if v := testutil.ToFloat64(b.e.m.BusReceived); v != 1 {
		t.Errorf("received counter %v, want 1", v)
	}
}

func TestRedisPublishRefusals(t *testing.T) {
	s := redistest.Start(t)
	o := testOptions(newClient(t, s.Addr), "a")
	o.MaxEnvelopeBytes = 100
	o.PublishQueue = 1
	o.PublishWait = -1
	b, err := NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// As if a PING had answered: a bus that has not reached Redis yet
	// refuses every publish as degraded.
	b.e.health.setLink(true)
	tests := []struct {
		name   string
		topic  string
		data   string
		want   error
		reason string
	}{
		{"bad topic", "a b", "1", ErrBadTopic, DropBadTopic},
		{"reserved", "__x", "1", ErrBadTopic, DropBadTopic},
		{"too large", "t", strings.Repeat("1", 100), ErrTooLarge, DropOversize},
		// Not started: no writer drains the queue of one, which a
		// publisher below holds; without PublishWait the next is refused
		// at once.
		{"queue full", "t", "2", ErrQueueFull, DropQueueFull},
	}
	queued := make(chan error, 1)
	go func() { queued <- b.Publish("t", []byte("1")) }()
	testkit.Eventually(t, waitLimit, "a queued publish", func() bool { return len(b.e.queue) == 1 })
	for _, tt := range tests {
		before := 0.0
		if tt.reason != "" {
			before = dropped(o.Metrics, tt.reason)
		}
		if err := b.Publish(tt.topic, []byte(tt.data)); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
		if tt.reason != "" && dropped(o.Metrics, tt.reason) != before+1 {
			t.Errorf("%s: dropped{%s} not counted", tt.name, tt.reason)
		}
	}
	b.Close()
	if err := <-queued; !errors.Is(err, ErrDegraded) {
		t.Errorf("a publish queued when the bus closed unstarted: %v, want ErrDegraded", err)
	}
	if err := b.Publish("t", []byte("1")); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if _, err := NewRedis(RedisOptions{}); err == nil {
		t.Error("NewRedis without Client or URL: no error")
	}
	if _, err := NewRedis(RedisOptions{URL: s.URL(), InstanceID: strings.Repeat("x", MaxInstanceIDLen+1)}); err == nil {
		t.Error("NewRedis with a long instance id: no error")
	}
}

func TestRedisURLOwnsClient(t *testing.T) {
	s := redistest.Start(t)
	o := testOptions(nil, "a")
	o.Client, o.URL = nil, s.URL()
	a, _ := startRedis(t, o)
	b, rb := startRedis(t, testOptions(newClient(t, s.Addr), "b"))
	if err := a.Publish("t", []byte("1")); err != nil {
		t.Fatal(err)
	}
	rb.awaitMsgs(t, 1)
	a.Close()
	b.Close()
	if err := a.e.client.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("client opened from URL after Close: ping %v, want ErrClosed", err)
	}
}

func TestRedisDegradedAndRecovered(t *testing.T) {
	s := redistest.Start(t)
	ca, cb := newClient(t, s.Addr), newClient(t, s.Addr)
	a, ra := startRedis(t, testOptions(ca, "a"))
	b, rb := startRedis(t, testOptions(cb, "b"))
	if a.Degraded() || b.Degraded() {
		t.Fatal("degraded at start")
	}

	s.Stop()
	for _, r := range []*recorder{ra, rb} {
		r.await(t, "degraded", func(_ []got, st []bool) bool { return len(st) >= 1 })
	}
	if !a.Degraded() || testutil.ToFloat64(a.e.m.BusDegraded) != 1 {
		t.Error("a: Degraded() or bus_degraded not set")
	}
	before := dropped(a.e.m, DropDegraded)
	if err := a.Publish("t", []byte("1")); !errors.Is(err, ErrDegraded) {
		t.Errorf("publish while degraded: %v, want ErrDegraded", err)
	}
	if dropped(a.e.m, DropDegraded) != before+1 {
		t.Error("publish while degraded: not counted")
	}

	s.Restart()
	for _, r := range []*recorder{ra, rb} {
		r.await(t, "recovered", func(_ []got, st []bool) bool { return len(st) >= 2 })
	}
	for name, r := range map[string]*recorder{"a": ra, "b": rb} {
		if _, st := r.snapshot(); fmt.Sprint(st) != "[true false]" {
			t.Errorf("%s: BusState calls %v, want [true false]", name, st)
		}
	}
	if a.Degraded() || testutil.ToFloat64(a.e.m.BusDegraded) != 0 {
		t.Error("a: still degraded after recovery")
	}
	// Recovery waits for the resubscription, so the first message after
	// it arrives.
	if err := a.Publish("t", []byte(`"after"`)); err != nil {
		t.Fatal(err)
	}
	if m := rb.awaitMsgs(t, 1); m[0].data != `"after"` {
		t.Errorf("after recovery b got %v", m)
	}
	if err := b.Publish("t", []byte(`"back"`)); err != nil {
		t.Fatal(err)
	}
	ra.awaitMsgs(t, 1)
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

func TestRedisStartWhileRedisDown(t *testing.T) {
	s := redistest.Start(t)
	s.Stop()
	a, ra := startRedis(t, testOptions(newClient(t, s.Addr), "a"))
	if !a.Degraded() {
		t.Fatal("Start with Redis down: not degraded")
	}
	if _, st := ra.snapshot(); fmt.Sprint(st) != "[true]" {
		t.Errorf("BusState calls %v, want [true]", st)
	}
	s.Restart()
	ra.await(t, "recovered", func(_ []got, st []bool) bool { return len(st) == 2 })
	b, _ := startRedis(t, testOptions(newClient(t, s.Addr), "b"))
	if err := b.Publish("t", []byte("1")); err != nil {
		t.Fatal(err)
	}
	ra.awaitMsgs(t, 1)
}

func TestRedisBatchesConcurrentPublishers(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	oa := testOptions(c, "a")
	oa.BatchSize = 128
	a, _ := startRedis(t, oa)
	b, rb := startRedis(t, testOptions(c, "b"))

	const pubs, each = 8, 1000
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Go(func() {
			for i := range each {
				data := fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i)
				err := a.Publish("t", data)
				for errors.Is(err, ErrQueueFull) {
					runtime.Gosched()
					err = a.Publish("t", data)
				}
				if err != nil {
					t.Errorf("publisher %d: %v", p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	msgs := rb.awaitMsgs(t, pubs*each)
	next := make([]int, pubs)
	for _, m := range msgs {
		var v struct{ P, I int }
		if err := json.Unmarshal([]byte(m.data), &v); err != nil {
			t.Fatal(err)
		}
		if v.I != next[v.P] {
			t.Fatalf("publisher %d: got message %d, want %d", v.P, v.I, next[v.P])
		}
		next[v.P]++
	}
	if len(msgs) != pubs*each {
		t.Errorf("got %d messages, want %d", len(msgs), pubs*each)
	}
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

// With HMACSecret set, only envelopes signed with it are delivered: an
// unsigned sibling's, one injected straight into Redis, one signed with
// another secret, and a signed one cut short are dropped (malformed); a
// signed data or control message from a sibling with the secret arrives.
func TestRedisSignedEnvelopes(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	secret := []byte("fleet secret")
	oa, ob := testOptions(c, "a"), testOptions(c, "b")
	oa.HMACSecret, ob.HMACSecret = secret, secret
	a, _ := startRedis(t, oa)
	b, rb := startRedis(t, ob)
	unsigned, _ := startRedis(t, testOptions(c, "u"))

	env := string(appendEnvelope(nil, "x", "room", []byte(`{"forged":true}`)))
	other := string(newSigner([]byte("other secret")).sign([]byte(env)))
	signed := string(newSigner(secret).sign([]byte(env)))
	for _, p := range []string{env, other, signed[:len(signed)-1], ""} {
		if err := c.Publish(context.Background(), b.Channel(), p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := unsigned.Publish("room", []byte(`{"unsigned":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishControl(UserKey("alice"), []byte(`{"op":"disconnect"}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish("room", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	msgs := rb.awaitMsgs(t, 2)
	if !sameMsgs(msgs, []got{{"control " + UserKey("alice"), `{"op":"disconnect"}`}, {"room", `{"ok":true}`}}) {
		t.Errorf("delivered %v, want the signed control and data messages only", msgs)
	}
	testkit.Eventually(t, waitLimit, "5 drops", func() bool { return dropped(b.e.m, DropMalformed) == 5 })
}

// BenchmarkSign is the cost of signing (or verifying) one envelope.
func BenchmarkSign(b *testing.B) {
	s := newSigner([]byte("a fleet secret"))
	for _, n := range []int{128, 1024, 65536} {
		env := appendEnvelope(nil, "0123456789abcdef", "chat:room-17", []byte(`"`+strings.Repeat("x", n)+`"`))
		b.Run(strconv.Itoa(n)+"B", func(b *testing.B) {
			b.SetBytes(int64(len(env)))
			b.ReportAllocs()
			buf := make([]byte, 0, len(env)+sigLen)
			for b.Loop() {
				buf = s.sign(append(buf[:0], env...))
			}
		})
	}
}

// BenchmarkVerify is the cost of checking one received envelope.
func BenchmarkVerify(b *testing.B) {
	s := newSigner([]byte("a fleet secret"))
	env := string(s.sign(appendEnvelope(nil, "0123456789abcdef", "chat:room-17", []byte(`"`+strings.Repeat("x", 128)+`"`))))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := s.verify(env); !ok {
			b.Fatal("bad")
		}
	}
}

// A captured signed control message (a disconnect) is delivered once, not
// again when replayed; a signed envelope whose clock is further than
// replayWindow from the receiver's is dropped (a data message replayed
// later, or a sibling whose clock is off).
func TestRedisSignedReplaysDropped(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	secret := []byte("fleet secret")
	ob := testOptions(c, "b")
	ob.HMACSecret = secret
	b, rb := startRedis(t, ob)

	sender := newSigner(secret)
	control := string(sender.sign(appendControl(nil, "a", UserKey("alice"), 1, []byte(`{"op":"disconnect"}`))))
	sender.now = func() time.Time { return time.Now().Add(-replayWindow - time.Second) }
	old := string(sender.sign(appendEnvelope(nil, "a", "room", []byte(`{"old":true}`))))
	sender.now = func() time.Time { return time.Now().Add(replayWindow + time.Second) }
	future := string(sender.sign(appendEnvelope(nil, "a", "room", []byte(`{"future":true}`))))
	sender.now = time.Now
	fresh := string(sender.sign(appendEnvelope(nil, "a", "room", []byte(`{"ok":true}`))))
	for _, p := range []string{control, control, old, future, control, fresh} {
		if err := c.Publish(context.Background(), b.Channel(), p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, waitLimit, "4 drops", func() bool { return dropped(b.e.m, DropMalformed) == 4 })
	msgs := rb.awaitMsgs(t, 2)
	if !sameMsgs(msgs, []got{{"control " + UserKey("alice"), `{"op":"disconnect"}`}, {"room", `{"ok":true}`}}) {
		t.Errorf("delivered %v, want the control message once and the fresh one", msgs)
	}
}

// sameMsgs compares what was delivered with want, in any order: control
// and data messages go through different receive workers.
func sameMsgs(msgs, want []got) bool {
	key := func(g got) string { return g.topic + " " + g.data }
	a, b := make([]string, len(msgs)), make([]string, len(want))
	for i := range msgs {
		a[i] = key(msgs[i])
	}
	for i := range want {
		b[i] = key(want[i])
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A control message is numbered from the fleet counter, and a bus
// subscribed after the number was given out refuses it: a disconnect
// captured off Redis does nothing on an instance started since. A bus
// that was subscribed accepts it once.
func TestRedisControlNumbersOutliveRestarts(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	secret := []byte("fleet secret")
	opts := func(id string) RedisOptions {
		o := testOptions(c, id)
		o.HMACSecret = secret
		return o
	}
	a, _ := startRedis(t, opts("a"))
	b, rb := startRedis(t, opts("b"))
	spy := c.Subscribe(context.Background(), b.Channel())
	defer spy.Close()
	if _, err := spy.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishControl(UserKey("alice"), []byte(`{"op":"disconnect"}`)); err != nil {
		t.Fatal(err)
	}
	captured, err := spy.ReceiveMessage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rb.awaitMsgs(t, 1)

	fresh, rf := startRedis(t, opts("fresh"))
	if err := c.Publish(context.Background(), b.Channel(), captured.Payload).Err(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Redis{b, fresh} {
		testkit.Eventually(t, waitLimit, "the replay refused by "+x.InstanceID(), func() bool { return dropped(x.e.m, DropMalformed) == 1 })
	}
	if err := a.PublishControl(UserKey("alice"), []byte(`{"op":"again"}`)); err != nil {
		t.Fatal(err)
	}
	if m := rf.awaitMsgs(t, 1); len(m) != 1 || m[0].data != `{"op":"again"}` {
		t.Errorf("fresh bus got %v, want only the control message sent after it started", m)
	}
	if m := rb.awaitMsgs(t, 2); len(m) != 2 {
		t.Errorf("b got %v", m)
	}
}

// A receive worker that falls behind drops, counts slow_receiver and
// tells the Receiver of the gap: after the messages that went before it,
// and before the next one of the topic.
func TestRedisSlowReceiverGap(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	a, _ := startRedis(t, testOptions(c, "a"))
	ob := testOptions(c, "b")
	ob.DeliverQueueSize = 1 // one waiting message per worker
	b, err := NewRedis(ob)
	if err != nil {
		t.Fatal(err)
	}
	rb := &blockingRecorder{recorder: newRecorder(), release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := b.Start(ctx, rb); err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	const n = 20
	for i := range n {
		if err := a.Publish("t", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Message 0 holds the worker, 1 waits in its queue, the rest are lost.
	testkit.Eventually(t, waitLimit, "the drops", func() bool { return dropped(b.e.m, DropSlowRecv) == n-2 })
	close(rb.release)
	// The channel is quiet now: the gap is told without waiting for the
	// topic's next message.
	rb.awaitMsgs(t, 3)
	if err := a.Publish("t", []byte(`"after"`)); err != nil {
		t.Fatal(err)
	}
	msgs := rb.awaitMsgs(t, 4)
	want := []got{{"t", "0"}, {"t", "1"}, {"gap t", ""}, {"t", `"after"`}}
	if !slices.Equal(msgs, want) {
		t.Errorf("received %v, want %v", msgs, want)
	}
}

// blockingRecorder is a recorder whose first delivery waits for release.
type blockingRecorder struct {
	*recorder
	once    sync.Once
	release chan struct{}
}

func (r *blockingRecorder) Deliver(topic string, data []byte) {
	r.recorder.Deliver(topic, data)
	r.once.Do(func() { <-r.release })
}

// holdingRecorder is a HoldingReceiver whose holders keep what they are
// given until Flush, and only then record it.
type holdingRecorder struct {
	*recorder
	plain atomic.Int64 // deliveries that bypassed the holders
}

func (r *holdingRecorder) Deliver(topic string, data []byte) {
	r.plain.Add(1)
	r.recorder.Deliver(topic, data)
}

func (r *holdingRecorder) Holder() Holder { return &heldBatch{r: r.recorder} }

type heldBatch struct {
	r    *recorder
	held []got
}

func (h *heldBatch) Deliver(topic string, data []byte) {
	h.held = append(h.held, got{topic, string(data)})
}

func (h *heldBatch) Flush() {
	h.r.mu.Lock()
	h.r.msgs = append(h.r.msgs, h.held...)
	h.r.mu.Unlock()
	h.held = h.held[:0]
	h.r.poke()
}

// A holding receiver's workers flush whenever their queues run dry: every
// message arrives although the holders record nothing until a Flush, and
// each topic's messages stay in order.
func TestRedisHoldingReceiverFlushesEveryBurst(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	a, _ := startRedis(t, testOptions(c, "a"))
	rb := &holdingRecorder{recorder: newRecorder()}
	b, err := NewRedis(testOptions(c, "b"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := b.Start(ctx, rb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	const topics, n = 8, 2000
	for i := range n {
		for {
			err := a.Publish(fmt.Sprintf("room%d", i%topics), fmt.Appendf(nil, `{"n":%d}`, i))
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			runtime.Gosched()
		}
	}
	msgs := rb.awaitMsgs(t, n)
	last := map[string]int{}
	for _, m := range msgs {
		var v struct{ N int }
		if err := json.Unmarshal([]byte(m.data), &v); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("room%d", v.N%topics); m.topic != want {
			t.Fatalf("message %d on %s, want %s", v.N, m.topic, want)
		}
		if prev, ok := last[m.topic]; ok && v.N <= prev {
			t.Fatalf("%s: message %d after %d", m.topic, v.N, prev)
		}
		last[m.topic] = v.N
	}
	if p := rb.plain.Load(); p != 0 {
		t.Errorf("%d deliveries bypassed the holders", p)
	}
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

// TestPingNotStarvedBySharedPool: traffic that holds every connection of
// the shared client (slow reads: a replay storm, presence writes) cannot
// delay the liveness PING, which has a connection of its own, so a Redis
// that answers is never reported down.
func TestPingNotStarvedBySharedPool(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 2, PoolTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	o := testOptions(c, "a")
	o.PingTimeout = 200 * time.Millisecond
	b, rb := startRedis(t, o)
	defer b.Close()
	if b.Degraded() {
		t.Fatal("degraded after a start with Redis up")
	}
	// Every pooled connection blocked for a second and a half, while the
	// pinger PINGs every 50ms with a 200ms timeout.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := c.BLPop(t.Context(), 1500*time.Millisecond, "test:nothing").Err(); err != redis.Nil {
				t.Errorf("BLPOP: %v, want a timeout (redis.Nil)", err)
			}
		})
	}
	wg.Wait()
	if _, states := rb.snapshot(); slices.Contains(states, true) || b.Degraded() {
		t.Fatalf("reported down while Redis answered: states %v", states)
	}
}
