package bus

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

func startSharded(t testing.TB, o ShardedOptions) (*Sharded, *recorder) {
	t.Helper()
	b, err := NewSharded(o)
	return started(t, b, err)
}

func shardedOptions(c redis.UniversalClient, id string, partitions int) ShardedOptions {
	return ShardedOptions{RedisOptions: testOptions(c, id), Partitions: partitions}
}

// topicsIn returns n topics of partition p (out of parts), named prefix-i.
func topicsIn(p, parts, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if t := fmt.Sprintf("%s-%d", prefix, i); Partition(t, parts) == p {
			out = append(out, t)
		}
	}
	return out
}

// oneTopicPerPartition returns a topic for each partition, in order.
func oneTopicPerPartition(parts int, prefix string) []string {
	out := make([]string, parts)
	for p := range parts {
		out[p] = topicsIn(p, parts, 1, prefix)[0]
	}
	return out
}

type counter map[string]int

func (c counter) SubscribersOf(topic string) int { return c[topic] }

func TestPartitionSpreadsAndIsStable(t *testing.T) {
	// Every instance of a fleet must agree, across versions: FNV-1a 32
	// modulo the partition count, exactly.
	for _, give := range []string{"a", "room-1", "chat:room/7@x", strings.Repeat("z", 256)} {
		h := fnv.New32a()
		h.Write([]byte(give))
		for _, n := range []int{1, 16, 1000} {
			if got, want := Partition(give, n), int(h.Sum32()%uint32(n)); got != want {
				t.Errorf("Partition(%q, %d) = %d, want %d", give, n, got, want)
			}
		}
	}
	seen := make([]int, 16)
	for i := range 1600 {
		seen[Partition(fmt.Sprintf("room-%d", i), 16)]++
	}
	for p, n := range seen {
		if n == 0 {
			t.Errorf("partition %d got no topic out of 1600", p)
		}
	}
	if got := PartitionChannel("rt:", 7); got != "{rt:p7}" {
		t.Errorf("PartitionChannel = %q, want {rt:p7}", got)
	}
}

func TestShardedRefcounting(t *testing.T) {
	s := redistest.Start(t)
	const parts = 4
	cnt := counter{"x": 42}
	o := shardedOptions(newClient(t, s.Addr), "a", parts)
	b, _ := startSharded(t, o)
	shardChannels := func() string {
		r, err := s.Do("PUBSUB", "SHARDCHANNELS")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	awaitShardChannels := func(want string) {
		t.Helper()
		testkit.Eventually(t, waitLimit, "PUBSUB SHARDCHANNELS "+want, func() bool { return shardChannels() == want })
	}
	same := topicsIn(0, parts, 2, "t") // two topics of partition 0
	other := topicsIn(1, parts, 1, "t")[0]

	if got := shardChannels(); got != "*0" {
		t.Fatalf("before any Subscribe: %s shard channels", got)
	}
	// Subscribe waits for Redis to confirm a new partition: no polling.
	b.Subscribe(same[0])
	if got := shardChannels(); got != "*1" {
		t.Fatalf("after first Subscribe: %s, want *1", got)
	}
	b.Subscribe(same[0])
	b.Subscribe(same[1])
	b.Subscribe(other)
	if got := shardChannels(); got != "*2" {
		t.Fatalf("two partitions wanted: %s, want *2", got)
	}
	want := []TopicCount{{same[0], 2}, {other, 1}, {same[1], 1}}
	slices.SortFunc(want[1:], func(x, y TopicCount) int { return cmpString(x.Topic, y.Topic) })
	if got := b.LocalSubjects(); !slices.Equal(got, want) {
		t.Errorf("LocalSubjects = %v, want %v", got, want)
	}
	if got := b.Subscribers(same[0]); got != 2 {
		t.Errorf("Subscribers = %d, want 2", got)
	}

	b.Unsubscribe(same[0])
	b.Unsubscribe(same[0])
	b.Unsubscribe(same[0]) // one too many: ignored
	b.Unsubscribe("never-subscribed")
	if got := b.Subscribers(same[0]); got != 0 {
		t.Errorf("Subscribers after unsubscribing = %d, want 0", got)
	}
	if got := shardChannels(); got != "*2" {
		t.Errorf("partition 0 still has %s: %s, want *2", same[1], got)
	}
	b.Unsubscribe(same[1])
	awaitShardChannels("*1")
	b.Unsubscribe(other)
	awaitShardChannels("*0")
	if got := b.LocalSubjects(); len(got) != 0 {
		t.Errorf("LocalSubjects after all left = %v", got)
	}
	// And back: a partition closed can be opened again.
	b.Subscribe(other)
	if got := shardChannels(); got != "*1" {
		t.Errorf("resubscribed: %s, want *1", got)
	}

	o.Cluster = cnt
	c, _ := startSharded(t, o)
	if got := c.Subscribers("x"); got != 42 {
		t.Errorf("Subscribers with a cluster counter = %d, want 42", got)
	}
	b.Close()
	c.Close()
	awaitShardChannels("*0")
	noBusGoroutines(t)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestShardedFiltersCoPartitionedTopics(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	const parts = 2
	a, _ := startSharded(t, shardedOptions(c, "a", parts))
	b, rb := startSharded(t, shardedOptions(c, "b", parts))
	ts := topicsIn(0, parts, 2, "f")
	b.Subscribe(ts[0])
	// ts[1] shares the partition but has no subscriber on b; it is
	// published first, so when ts[0]'s message arrives, ts[1]'s was seen.
	for _, topic := range []string{ts[1], ts[0]} {
		if err := a.Publish(topic, []byte(`"`+topic+`"`)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := rb.awaitMsgs(t, 1)
	if len(msgs) != 1 || msgs[0].topic != ts[0] {
		t.Errorf("b got %v, want only %s", msgs, ts[0])
	}
	for _, reason := range []string{DropMalformed, DropBadTopic, DropOversize, DropSlowRecv} {
		if v := dropped(b.e.m, reason); v != 0 {
			t.Errorf("filtering counted as a drop: dropped{%s} = %v", reason, v)
		}
	}
	if v := testutil.ToFloat64(b.e.m.BusReceived); v != 1 {
		t.Errorf("received counter %v, want 1", v)
	}
}

// exchange checks delivery both ways across every partition between two
// sharded buses, and that neither hears itself.
func exchange(t *testing.T, a, b *Sharded, ra, rb *recorder, parts int) {
	t.Helper()
	topics := oneTopicPerPartition(parts, "x")
	for _, topic := range topics {
		a.Subscribe(topic)
		b.Subscribe(topic)
	}
	for i, topic := range topics {
		for j := range 3 {
			if err := a.Publish(topic, fmt.Appendf(nil, `{"from":"a","p":%d,"n":%d}`, i, j)); err != nil {
				t.Fatal(err)
			}
			if err := b.Publish(topic, fmt.Appendf(nil, `{"from":"b","p":%d,"n":%d}`, i, j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := 3 * len(topics)
	for name, r := range map[string]*recorder{"a": ra, "b": rb} {
		msgs := r.awaitMsgs(t, n)
		perTopic := map[string]int{}
		for _, m := range msgs {
			if want := fmt.Sprintf(`{"from":"%s","p":%d,"n":%d}`, other(name), slices.Index(topics, m.topic), perTopic[m.topic]); m.data != want {
				t.Fatalf("%s got %s on %s, want %s", name, m.data, m.topic, want)
			}
			perTopic[m.topic]++
		}
		if len(msgs) != n {
			t.Errorf("%s got %d messages, want %d", name, len(msgs), n)
		}
	}
}

func other(name string) string {
	if name == "a" {
		return "b"
	}
	return "a"
}

func TestShardedDeliveryOneNode(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	const parts = 8
	a, ra := startSharded(t, shardedOptions(c, "a", parts))
	b, rb := startSharded(t, shardedOptions(c, "b", parts))
	exchange(t, a, b, ra, rb, parts)
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

func TestShardedDeliveryCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	const parts = 16
	ca, cb := newClusterClient(t, cl.Addrs), newClusterClient(t, cl.Addrs)

	// The partitions must really spread over the nodes, or this test
	// proves nothing about per-slot subscriptions.
	nodes := map[string]int{}
	for p := range parts {
		m, err := ca.MasterForKey(context.Background(), PartitionChannel("test:", p))
		if err != nil {
			t.Fatal(err)
		}
		nodes[m.Options().Addr]++
	}
	if len(nodes) != 3 {
		t.Fatalf("partitions on %d nodes (%v), want all 3", len(nodes), nodes)
	}

	a, ra := startSharded(t, shardedOptions(ca, "a", parts))
	b, rb := startSharded(t, shardedOptions(cb, "b", parts))
	if a.Degraded() || b.Degraded() {
		t.Fatal("degraded on a healthy cluster")
	}
	exchange(t, a, b, ra, rb, parts)

	// Each node carries the shard channels of its own slots, and only those.
	total := 0
	for _, n := range cl.Nodes {
		r, err := n.Do("PUBSUB", "SHARDCHANNELS")
		if err != nil {
			t.Fatal(err)
		}
		var k int
		fmt.Sscanf(r, "*%d", &k)
		if k != nodes[n.Addr] {
			t.Errorf("node %s has %d shard channels, want %d", n.Addr, k, nodes[n.Addr])
		}
		total += k
	}
	if total != parts {
		t.Errorf("%d shard channels in the cluster, want %d", total, parts)
	}
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

func TestShardedDegradedAndRecovered(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	const parts = 4
	a, ra := startSharded(t, shardedOptions(c, "a", parts))
	b, rb := startSharded(t, shardedOptions(newClient(t, s.Addr), "b", parts))
	topics := oneTopicPerPartition(parts, "d")
	// The last partition is first wanted while degraded.
	topics, late := topics[:parts-1], topics[parts-1]
	for _, topic := range topics {
		b.Subscribe(topic)
	}

	s.Stop()
	for _, r := range []*recorder{ra, rb} {
		r.await(t, "degraded", func(_ []got, st []bool) bool { return len(st) >= 1 })
	}
	if err := a.Publish(topics[0], []byte("1")); err != ErrDegraded {
		t.Errorf("publish while degraded: %v, want ErrDegraded", err)
	}
	if dropped(a.e.m, DropDegraded) != 1 {
		t.Error("publish while degraded: not counted")
	}
	// Subscribing while degraded does not wait, and is applied on recovery.
	b.Subscribe(late)

	s.Restart()
	for _, r := range []*recorder{ra, rb} {
		r.await(t, "recovered", func(_ []got, st []bool) bool { return len(st) >= 2 })
	}
	for name, r := range map[string]*recorder{"a": ra, "b": rb} {
		if _, st := r.snapshot(); fmt.Sprint(st) != "[true false]" {
			t.Errorf("%s: BusState calls %v, want [true false]", name, st)
		}
	}
	for _, topic := range append(topics, late) {
		if err := a.Publish(topic, []byte(`"`+topic+`"`)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := rb.awaitMsgs(t, len(topics)+1)
	var gotTopics []string
	for _, m := range msgs {
		gotTopics = append(gotTopics, m.topic)
	}
	slices.Sort(gotTopics)
	wantTopics := slices.Sorted(slices.Values(append(topics, late)))
	if !slices.Equal(gotTopics, wantTopics) {
		t.Errorf("after recovery b got %v, want %v", gotTopics, wantTopics)
	}
	a.Close()
	b.Close()
	noBusGoroutines(t)
}

func TestKeyTagSharesTheSlotOfThePartitionChannel(t *testing.T) {
	for _, topic := range []string{"room:1", "room:2", "a", "chat/x"} {
		p := Partition(topic, 16)
		if got, want := KeyTag("rt:", topic, 0), PartitionChannel("rt:", p); got != want {
			t.Errorf("KeyTag(%q) = %q, want %q", topic, got, want)
		}
	}
}

// Unsubscribing a partition's last topic while its messages stream in
// returns, and leaves nothing running: the subscription hands payloads to
// the bus's topic filter (which takes the bus's lock) without its own
// lock, which Unsubscribe takes, under the bus's lock, to stop it. (The
// interleaving that deadlocked when the handler ran under the
// subscription's lock is narrow: this guards the path, it does not
// reproduce that race reliably.)
func TestShardedUnsubscribeWhileReceiving(t *testing.T) {
	s := redistest.Start(t)
	c := newClient(t, s.Addr)
	a, _ := startSharded(t, shardedOptions(c, "a", 1))
	b, rb := startSharded(t, shardedOptions(c, "b", 1))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := a.Publish("t", []byte("1")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 50 {
		b.Subscribe("t")
		rb.awaitMsgs(t, i+1) // the partition's messages are streaming in
		b.Unsubscribe("t")
	}
	close(stop)
	<-done
	a.Close()
	b.Close()
	noBusGoroutines(t)
}
