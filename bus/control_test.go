package bus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

func TestControlEnvelopeRoundTrip(t *testing.T) {
	env := appendControl(nil, "a", UserKey("alice"), 7, []byte(`{"op":"disconnect"}`))
	if !isControl(string(env)) {
		t.Fatal("a control envelope is not recognised as one")
	}
	sender, key, seq, data, own, reason := decodeControl(string(env), "b", DefaultMaxEnvelopeBytes)
	if own || reason != "" || sender != "a" || key != "__user:alice" || seq != 7 || data != `{"op":"disconnect"}` {
		t.Fatalf("decode = %q %q %d %q own=%v reason=%q", sender, key, seq, data, own, reason)
	}
	if _, _, _, _, own, _ := decodeControl(string(env), "a", DefaultMaxEnvelopeBytes); !own {
		t.Error("own control envelope not recognised")
	}
	// A data envelope decoder refuses control envelopes, and the other
	// way round, so neither kind can be taken for the other.
	if _, _, _, reason := decodeEnvelope(string(env), "b", DefaultMaxEnvelopeBytes); reason != DropMalformed {
		t.Errorf("decodeEnvelope(control) reason %q, want malformed", reason)
	}
	for _, tt := range []struct {
		name, give, want string
	}{
		{"unreserved key", string(appendControl(nil, "a", "room", 1, []byte(`1`))), DropBadTopic},
		{"bare prefix", string(appendControl(nil, "a", "__", 1, []byte(`1`))), DropBadTopic},
		{"long key", string(appendControl(nil, "a", UserKey(strings.Repeat("u", 1025)), 1, []byte(`1`))), DropBadTopic},
		{"truncated", string(env[:4]), DropMalformed},
		{"no number", string(env[:len(env)-len(`{"op":"disconnect"}`)-1]), DropMalformed},
		{"oversize", string(appendControl(nil, "a", UserKey("u"), 1, []byte(`"`+strings.Repeat("x", 5000)+`"`))), DropOversize},
	} {
		if _, _, _, _, _, reason := decodeControl(tt.give, "b", 4096); reason != tt.want {
			t.Errorf("%s: reason %q, want %q", tt.name, reason, tt.want)
		}
	}
}

// controlExchange checks that control messages cross from a to b, in
// publish order, and (when ordered: data and control share one channel) in
// order with data messages; and that bad keys are refused at the sender.
func controlExchange(t *testing.T, a, b Bus, rb *recorder, key string, ordered bool) {
	t.Helper()
	if err := a.PublishControl("room", []byte(`1`)); err != ErrBadTopic {
		t.Errorf("PublishControl(unreserved) = %v, want ErrBadTopic", err)
	}
	topic := "ctl-room"
	b.Subscribe(topic)
	defer b.Unsubscribe(topic)
	var want, wantData, wantCtl []got
	for i := range 3 {
		d := got{topic, fmt.Sprint(i)}
		c := got{"control " + key, fmt.Sprintf(`{"n":%d}`, i)}
		if err := a.Publish(topic, []byte(d.data)); err != nil {
			t.Fatal(err)
		}
		if err := a.PublishControl(key, []byte(c.data)); err != nil {
			t.Fatal(err)
		}
		want, wantData, wantCtl = append(want, d, c), append(wantData, d), append(wantCtl, c)
	}
	msgs := rb.awaitMsgs(t, 6)
	var gotData, gotCtl []got
	for _, m := range msgs {
		if m.topic == topic {
			gotData = append(gotData, m)
		} else {
			gotCtl = append(gotCtl, m)
		}
	}
	if !slices.Equal(gotData, wantData) || !slices.Equal(gotCtl, wantCtl) || ordered && !slices.Equal(msgs, want) {
		t.Fatalf("got %v, want %v (ordered %v)", msgs, want, ordered)
	}
}

func TestControlMemory(t *testing.T) {
	broker := NewMemoryBroker()
	a, _ := started(t, NewMemory(broker, nil), nil)
	b, rb := started(t, NewMemory(broker, nil), nil)
	controlExchange(t, a, b, rb, UserKey("alice"), true)
}

func TestControlRedis(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	a, _ := startRedis(t, testOptions(c, "a"))
	b, rb := startRedis(t, testOptions(c, "b"))
	// Control and data messages go through different receive workers:
	// each kind keeps its order, not their interleaving.
	controlExchange(t, a, b, rb, UserKey("alice"), false)
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

// On the sharded bus a control message reaches the instances that declared
// interest in its key, on the key's partition, and no other: the server
// subscribes UserKey(U) while U has a connection on it. The cluster puts
// the partitions on three nodes, so this also proves the key's partition
// is found on whichever node holds it.
func TestControlShardedCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	const parts = 16
	a, _ := startSharded(t, shardedOptions(newClusterClient(t, cl.Addrs), "a", parts))
	b, rb := startSharded(t, shardedOptions(newClusterClient(t, cl.Addrs), "b", parts))
	c, rc := startSharded(t, shardedOptions(newClusterClient(t, cl.Addrs), "c", parts))

	// A user whose key shares no partition with the data topic, so b hears
	// it only through its interest in the key.
	user := "alice"
	for i := 0; Partition(UserKey(user), parts) == Partition("ctl-room", parts); i++ {
		user = fmt.Sprintf("alice-%d", i)
	}
	key := UserKey(user)
	b.Subscribe(key)
	controlExchange(t, a, b, rb, key, false)
	if got := b.LocalSubjects(); len(got) != 0 {
		t.Errorf("LocalSubjects lists control keys: %v", got)
	}

	// c has no interest in the key: a control message for it, fenced by a
	// data message c does want on the same partition, never arrives.
	fence := topicsIn(Partition(key, parts), parts, 1, "fence")[0]
	c.Subscribe(fence)
	if err := a.PublishControl(key, []byte(`{"n":"late"}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(fence, []byte(`"fence"`)); err != nil {
		t.Fatal(err)
	}
	msgs := rc.awaitMsgs(t, 1)
	if len(msgs) != 1 || msgs[0].topic != fence {
		t.Errorf("c without interest got %v, want only the fence", msgs)
	}
	b.Unsubscribe(key)
	for _, x := range []*Sharded{a, b, c} {
		x.Close()
	}
	noBusGoroutines(t)
}

// TestReplayWindowAdmitsEachNumberOnce: against a model (every number
// admitted at most once; every number above the newest admitted is new;
// one within winSize below it is new unless admitted), for random
// sequences with overtaking and replays.
func TestReplayWindowAdmitsEachNumberOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var w replayWin
		seen := map[uint64]bool{}
		var hwm uint64
		next := uint64(1)
		for range 2000 {
			var seq uint64
			switch rng.IntN(4) {
			case 0: // a replay of anything so far, or a number never sent
				seq = 1 + rng.Uint64N(next)
			case 1: // overtaken: a little below the newest
				seq = next - min(next-1, rng.Uint64N(2*winSize))
			default: // new, after a jump (the other senders' numbers)
				next += 1 + rng.Uint64N(3*winSize)
				seq = next
			}
			want := !seen[seq] && (seq > hwm || hwm-seq < winSize)
			if got := w.admit(seq, 0); got != want {
				t.Fatalf("round %d: admit(%d) = %v, want %v (hwm %d)", round, seq, got, want, hwm)
			}
			if want {
				seen[seq] = true
				hwm = max(hwm, seq)
			}
		}
	}
}

// TestControlFloorNeverGoesDown: a counter that went missing or holds
// something else leaves a subscription's floor where it was.
func TestControlFloorNeverGoesDown(t *testing.T) {
	s := redistest.Start(t)
	g := newControlGuard(newClient(t, s.Addr), "t:")
	var f controlFloor
	f.v.Store(-1)
	if _, err := s.Do("SET", "t:ctl:seq", "100"); err != nil {
		t.Fatal(err)
	}
	g.confirmed(&f, waitLimit)
	if v := f.v.Load(); v != 100 {
		t.Fatalf("floor %d, want 100", v)
	}
	for _, change := range [][]string{{"DEL", "t:ctl:seq"}, {"SET", "t:ctl:seq", "x"}, {"SET", "t:ctl:seq", "7"}} {
		if _, err := s.Do(change...); err != nil {
			t.Fatal(err)
		}
		g.confirmed(&f, waitLimit)
		if v := f.v.Load(); v != 100 {
			t.Errorf("after %v: floor %d, want it kept at 100", change, v)
		}
		if g.admit(&f, "a", 50, 0, 0, waitLimit) {
			t.Errorf("after %v: number 50, below the floor, admitted", change)
		}
	}
	if !g.admit(&f, "a", 101, 0, 0, waitLimit) || g.admit(&f, "a", 101, 0, 0, waitLimit) {
		t.Error("number 101 not admitted exactly once")
	}
}

// noticeJam is a recorder whose notices wait until release: a receiving
// instance whose data workers are all stuck behind a flood of notices.
type noticeJam struct {
	*recorder
	release chan struct{}
}

func (r *noticeJam) DeliverNotice(key string, data []byte) {
	<-r.release
	r.recorder.DeliverNotice(key, data)
}

// TestControlNotDrownedByNotices: a flood of notices (presence diffs) that
// jams every data worker of the receiver and overflows their queues
// leaves control messages untouched: each arrives, once, through their
// own lane, and none is refused as replayed.
func TestControlNotDrownedByNotices(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	secret := []byte("0123456789abcdef0123456789abcdef")
	oa, ob := testOptions(c, "a"), testOptions(c, "b")
	oa.HMACSecret, ob.HMACSecret = secret, secret
	ob.DeliverQueueSize = 1 // one waiting message per worker
	a, _ := startRedis(t, oa)
	b, err := NewRedis(ob)
	if err != nil {
		t.Fatal(err)
	}
	rb := &noticeJam{recorder: newRecorder(), release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := b.Start(ctx, rb); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var once sync.Once
	free := func() { once.Do(func() { close(rb.release) }) }
	defer free() // before Close, or a failure would wait on the jam
	if err := a.PublishNotice("room", []byte(`1`)); err != ErrBadTopic {
		t.Errorf("PublishNotice(unreserved) = %v, want ErrBadTopic", err)
	}

	n := 4 * len(b.e.workers)
	for i := range n {
		if err := a.PublishNotice(fmt.Sprintf("__presence:room%d", i), []byte(`{"joins":[]}`)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, waitLimit, "notices dropped by jammed workers", func() bool { return dropped(b.e.m, DropSlowRecv) > 0 })
	var want []got
	for i := range 3 {
		d := fmt.Sprintf(`{"op":"disconnect","n":%d}`, i)
		if err := a.PublishControl(UserKey("alice"), []byte(d)); err != nil {
			t.Fatal(err)
		}
		want = append(want, got{"control " + UserKey("alice"), d})
	}
	if msgs := rb.awaitMsgs(t, 3); !slices.Equal(msgs, want) {
		t.Errorf("with every data worker jammed, got %v, want %v", msgs, want)
	}
	if m := dropped(b.e.m, DropMalformed); m != 0 {
		t.Errorf("%v received envelopes dropped as malformed or replayed", m)
	}
	free()
	rb.await(t, "the notices left in the queues", func(m []got, _ []bool) bool {
		return len(m) == 3+n-int(dropped(b.e.m, DropSlowRecv))
	})
	msgs, _ := rb.snapshot()
	for _, m := range msgs[3:] {
		if !strings.HasPrefix(m.topic, "notice __presence:room") {
			t.Fatalf("after the control messages: %v", m)
		}
	}
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

func TestNoticeEnvelopeRoundTrip(t *testing.T) {
	env := appendNotice(nil, "a", "__presence:room", []byte(`{"joins":[]}`))
	key, data, own, reason := decodeNotice(string(env), "b", DefaultMaxEnvelopeBytes)
	if own || reason != "" || key != "__presence:room" || data != `{"joins":[]}` {
		t.Fatalf("decode = %q %q own=%v reason=%q", key, data, own, reason)
	}
	// Neither the data nor the control decoder takes a notice, and the
	// notice decoder takes neither of them.
	if _, _, _, reason := decodeEnvelope(string(env), "b", DefaultMaxEnvelopeBytes); reason != DropMalformed {
		t.Errorf("decodeEnvelope(notice) reason %q, want malformed", reason)
	}
	if _, _, _, _, _, reason := decodeControl(string(env), "b", DefaultMaxEnvelopeBytes); reason != DropMalformed {
		t.Errorf("decodeControl(notice) reason %q, want malformed", reason)
	}
	ctl := appendControl(nil, "a", UserKey("u"), 1, []byte(`1`))
	if _, _, _, reason := decodeNotice(string(ctl), "b", DefaultMaxEnvelopeBytes); reason != DropMalformed {
		t.Errorf("decodeNotice(control) reason %q, want malformed", reason)
	}
	if _, _, _, reason := decodeNotice(string(appendNotice(nil, "a", "room", []byte(`1`))), "b", DefaultMaxEnvelopeBytes); reason != DropBadTopic {
		t.Errorf("decodeNotice(unreserved key) reason %q, want bad_topic", reason)
	}
}

func TestNoticeMemory(t *testing.T) {
	broker := NewMemoryBroker()
	a, _ := started(t, NewMemory(broker, nil), nil)
	_, rb := started(t, NewMemory(broker, nil), nil)
	if err := a.PublishNotice("__presence:r", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if msgs := rb.awaitMsgs(t, 1); msgs[0] != (got{"notice __presence:r", "1"}) {
		t.Errorf("got %v", msgs)
	}
}

// TestPublishNotRefusedByNotices: notices have a send queue of their own.
// With Redis holding every PUBLISH (CLIENT PAUSE WRITE: PINGs still
// answer, so the bus stays up) and a data queue of 8 that does not wait
// for room, a flood of notices overflows only their own queue, oldest
// first and counted, and a plain publish is still queued and taken once
// Redis writes again, never refused; the newest notice arrives.
func TestPublishNotRefusedByNotices(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	oa := testOptions(c, "a")
	oa.PublishQueue, oa.PublishWait, oa.Writers, oa.BatchSize = 8, -1, 1, 1
	a, _ := startRedis(t, oa)
	b, rb := startRedis(t, testOptions(c, "b"))

	if _, err := s.Do("CLIENT", "PAUSE", "60000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			if _, err := s.Do("CLIENT", "UNPAUSE"); err != nil {
				t.Error(err)
			}
		}
	}
	defer unpause()
	const n = noticeQueue + 1000
	for i := range n {
		if err := a.PublishNotice("__presence:churn", fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatalf("notice %d: %v", i, err)
		}
	}
	// The one writer holds at most one notice; the queue keeps the newest.
	if d, min := dropped(a.e.m, DropNoticeOverflow), float64(n-noticeQueue-1); d < min {
		t.Errorf("%v notices dropped as overflow, want at least %v", d, min)
	}
	published := make(chan error, 1)
	go func() { published <- a.Publish("room", []byte(`"plain"`)) }()
	testkit.Eventually(t, waitLimit, "the plain publish queued or answered", func() bool {
		return len(a.e.queue) == 1 || len(published) == 1
	})
	unpause()
	if err := <-published; err != nil {
		t.Errorf("plain publish during a notice flood: %v", err)
	}
	if q := dropped(a.e.m, DropQueueFull); q != 0 {
		t.Errorf("%v publishes refused as queue_full", q)
	}
	last := fmt.Sprintf(`{"n":%d}`, n-1)
	rb.await(t, "the plain message and the newest notice", func(m []got, _ []bool) bool {
		return slices.Contains(m, got{"room", `"plain"`}) && slices.Contains(m, got{"notice __presence:churn", last})
	})
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

// TestNoticeEnvelopeIsWhatABusSends: a notice built by NoticeEnvelope and
// published straight to Redis reaches a signed bus's Receiver like one of
// its siblings' notices.
func TestNoticeEnvelopeIsWhatABusSends(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	secret := []byte("0123456789abcdef0123456789abcdef")
	o := testOptions(c, "b")
	o.HMACSecret = secret
	b, rb := startRedis(t, o)
	env := NoticeEnvelope("gen", "__presence:room", []byte(`{"joins":[]}`), secret)
	if err := c.Publish(context.Background(), "test:bus", env).Err(); err != nil {
		t.Fatal(err)
	}
	if m := rb.awaitMsgs(t, 1); m[0] != (got{"notice __presence:room", `{"joins":[]}`}) {
		t.Errorf("received %v", m)
	}
	b.Close()
	noBusGoroutines(t)
}
