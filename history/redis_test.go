package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
)

// positions records what a bus delivers with positions.
type positions struct {
	mu   sync.Mutex
	got  map[string][]uint64
	data map[string][]string
	kick chan struct{}
}

func newPositions() *positions {
	return &positions{got: map[string][]uint64{}, data: map[string][]string{}, kick: make(chan struct{}, 1)}
}

func (p *positions) Deliver(string, []byte)        {}
func (p *positions) DeliverControl(string, []byte) {}
func (p *positions) DeliverNotice(string, []byte)  {}
func (p *positions) BusState(bool)                 {}
func (p *positions) Gap(string)                    {}
func (p *positions) DeliverAt(topic string, data []byte, epoch string, offset uint64) {
	p.mu.Lock()
	p.got[topic] = append(p.got[topic], offset)
	p.data[topic] = append(p.data[topic], epoch+" "+string(data))
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// await waits until topic has n deliveries and returns their offsets.
func (p *positions) await(t *testing.T, topic string, n int) []uint64 {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		got := append([]uint64(nil), p.got[topic]...)
		p.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-p.kick:
		case <-timeout:
			t.Fatalf("%s: %d of %d deliveries: %v", topic, len(got), n, got)
		}
	}
}

type testBus interface {
	bus.Bus
	bus.HistoryPublisher
}

func startBus(t *testing.T, b testBus, r bus.Receiver) {
	t.Helper()
	if err := b.Start(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
}

func newStore(t *testing.T, c redis.UniversalClient, b bus.HistoryPublisher, parts int, errs *prometheus.CounterVec) *Redis {
	t.Helper()
	s, err := NewRedis(Config{}, RedisDeps{Client: c, Bus: b, KeyPrefix: "t:", Partitions: parts, StoreErrors: errs})
	if err != nil {
		t.Fatal(err)
	}
	s.Start(context.Background())
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisStorePublishesInOffsetOrderToEveryInstance(t *testing.T) {
	defer leakcheck.Check(t)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	a, err := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "a", HMACSecret: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "b", HMACSecret: []byte("k")})
	ra, rb := newPositions(), newPositions()
	startBus(t, a, ra)
	startBus(t, b, rb)
	store := newStore(t, client, a, 0, nil)
	pol := Policy{Size: 1000, TTL: time.Minute}

	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if _, _, err := store.Publish(ctx, Publish{Topic: "room", Data: fmt.Appendf(nil, `"%d-%d"`, w, i), Policy: pol}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for name, r := range map[string]*positions{"publisher's own instance": ra, "other instance": rb} {
		got := r.await(t, "room", 200)
		for i, o := range got {
			if o != uint64(i+1) {
				t.Fatalf("%s: delivery %d has offset %d", name, i, o)
			}
		}
	}
	pos, ms, err := store.Read(ctx, "room", 190, 100, pol)
	if err != nil || pos.Offset != 200 || len(ms) != 10 || ms[0].Offset != 191 || ms[9].Offset != 200 {
		t.Fatalf("read after 190: %+v %v %v", pos, offsets(ms), err)
	}
	_, ms, _ = store.Read(ctx, "room", Newest, 3, pol)
	if fmt.Sprint(offsets(ms)) != "[198 199 200]" {
		t.Fatalf("newest 3: %v", offsets(ms))
	}
}

func TestRedisStoreBoundsIdempotencyAndEpochs(t *testing.T) {
	defer leakcheck.Check(t)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	a, _ := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "a"})
	ra := newPositions()
	startBus(t, a, ra)
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "e"}, []string{"op"})
	store := newStore(t, client, a, 0, errs)
	pol := Policy{Size: 3, TTL: time.Minute}

	empty, ms, err := store.Read(ctx, "t", 0, 10, pol)
	if err != nil || empty.Epoch == "" || empty.Offset != 0 || len(ms) != 0 {
		t.Fatalf("empty topic: %+v %v %v", empty, ms, err)
	}
	for i := range 5 {
		p, _, err := store.Publish(ctx, Publish{Topic: "t", Data: []byte(fmt.Sprint(i)), Policy: pol})
		if err != nil || p.Epoch != empty.Epoch || p.Offset != uint64(i+1) {
			t.Fatalf("publish %d: %+v %v", i, p, err)
		}
	}
	_, ms, _ = store.Read(ctx, "t", 0, 10, pol)
	if fmt.Sprint(offsets(ms)) != "[3 4 5]" {
		t.Fatalf("size 3 keeps %v", offsets(ms))
	}
	for i, m := range ms {
		if want := fmt.Sprint(i + 2); string(m.Data) != want {
			t.Fatalf("message %d holds %s, want %s", m.Offset, m.Data, want)
		}
	}

	idem := Publish{Topic: "t", Data: []byte(`"x"`), Policy: pol, IdempotencyKey: "user:k1"}
	first, dup, _ := store.Publish(ctx, idem)
	again, dup2, _ := store.Publish(ctx, idem)
	if dup || !dup2 || first != again {
		t.Fatalf("idempotent publish: %+v %v then %+v %v", first, dup, again, dup2)
	}
	ra.await(t, "t", 6) // five, and the idempotent one once

	// A script cache flushed (a failover to a replica that never loaded
	// it): the next publishes still go through.
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if p, _, err := store.Publish(ctx, Publish{Topic: "t", Data: []byte(`7`), Policy: pol}); err != nil || p.Offset != 7 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", p, err)
	}
	if _, _, err := store.Read(ctx, "t", 0, 1, pol); err != nil {
		t.Fatalf("read after SCRIPT FLUSH: %v", err)
	}

	// Metadata lost: a new epoch, and the old messages are gone with it.
	_, meta := store.keys("t")
	client.Del(ctx, meta)
	p, _, _ := store.Publish(ctx, Publish{Topic: "t", Data: []byte(`8`), Policy: pol})
	if p.Epoch == empty.Epoch || p.Offset != 1 {
		t.Fatalf("after the metadata was lost: %+v", p)
	}
	_, ms, _ = store.Read(ctx, "t", 0, 10, pol)
	if fmt.Sprint(offsets(ms)) != "[1]" {
		t.Fatalf("new epoch keeps %v", offsets(ms))
	}

	// Redis gone: unavailable, counted.
	srv.Stop()
	if _, _, err := store.Publish(ctx, Publish{Topic: "t", Data: []byte(`9`), Policy: pol}); err == nil {
		t.Fatal("publish with Redis stopped succeeded")
	}
	if _, _, err := store.Read(ctx, "t", 0, 1, pol); err == nil {
		t.Fatal("read with Redis stopped succeeded")
	}
	if testutil.ToFloat64(errs.WithLabelValues("publish")) == 0 || testutil.ToFloat64(errs.WithLabelValues("read")) == 0 {
		t.Fatal("store errors not counted")
	}
}

func TestRedisStoreOnClusterWithTheShardedBus(t *testing.T) {
	defer leakcheck.Check(t)
	cl := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	defer client.Close()
	const parts = 8
	a, _ := bus.NewSharded(bus.ShardedOptions{RedisOptions: bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "a"}, Partitions: parts})
	b, _ := bus.NewSharded(bus.ShardedOptions{RedisOptions: bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "b"}, Partitions: parts})
	ra, rb := newPositions(), newPositions()
	startBus(t, a, ra)
	startBus(t, b, rb)
	store := newStore(t, client, a, parts, nil)
	pol := Policy{Size: 100, TTL: time.Minute}
	topics := []string{"room:1", "room:2", "room:3", "room:4", "room:5", "room:6"}
	for _, topic := range topics {
		a.Subscribe(topic)
		b.Subscribe(topic)
	}
	for i := range 10 {
		for _, topic := range topics {
			if _, _, err := store.Publish(ctx, Publish{Topic: topic, Data: []byte(fmt.Sprint(i)), Policy: pol}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, topic := range topics {
		for _, r := range []*positions{ra, rb} {
			if got := r.await(t, topic, 10); fmt.Sprint(got) != "[1 2 3 4 5 6 7 8 9 10]" {
				t.Fatalf("%s: %v", topic, got)
			}
		}
		if _, ms, err := store.Read(ctx, topic, 5, 100, pol); err != nil || len(ms) != 5 {
			t.Fatalf("%s: read %v %v", topic, offsets(ms), err)
		}
	}
}

// Whoever can write Redis keys can corrupt a topic's metadata: an offset
// that is not a number, an epoch with a space (positions are "epoch
// offset") or too long. Each is taken as lost metadata: the next publish
// starts a new epoch at offset 1 and the next read answers one, instead of
// failing the topic until metaTtl; the old messages go with it. Before, a
// non-numeric offset failed every publish and read of the topic.
func TestRedisStoreCorruptMetadataStartsANewEpoch(t *testing.T) {
	defer leakcheck.Check(t)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	a, _ := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "a"})
	startBus(t, a, newPositions())
	store := newStore(t, client, a, 0, nil)
	pol := Policy{Size: 10, TTL: time.Minute}
	for i, corrupt := range []map[string]any{
		{"o": "not a number"},
		{"o": "-3"},
		{"o": "1e300"},
		{"e": "two words"},
		{"e": "0123456789abcdef0123456789abcdef0"},
		{"e": ""},
	} {
		topic := fmt.Sprint("c", i)
		first, _, err := store.Publish(ctx, Publish{Topic: topic, Data: []byte(`1`), Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		_, meta := store.keys(topic)
		if err := client.HSet(ctx, meta, corrupt).Err(); err != nil {
			t.Fatal(err)
		}
		pos, ms, err := store.Read(ctx, topic, 0, 10, pol)
		if err != nil || pos.Epoch == first.Epoch || pos.Offset != 0 || len(ms) != 0 {
			t.Errorf("%v: read %+v %v %v, want a new epoch at 0", corrupt, pos, offsets(ms), err)
		}
		client.HSet(ctx, meta, corrupt) // again: the read repaired it
		p, _, err := store.Publish(ctx, Publish{Topic: topic, Data: []byte(`2`), Policy: pol})
		if err != nil || p.Epoch == first.Epoch || p.Offset != 1 {
			t.Errorf("%v: publish %+v %v, want a new epoch at 1", corrupt, p, err)
		}
		if _, ms, _ := store.Read(ctx, topic, 0, 10, pol); fmt.Sprint(offsets(ms)) != "[1]" {
			t.Errorf("%v: the new epoch holds %v", corrupt, offsets(ms))
		}
	}
}

// TestRedisStoreRefusesAtOnceWhileDown: while Down says Redis is
// unreachable, a publish is refused with ErrUnavailable without a round
// trip (counted), and the store publishes again once it is reachable.
func TestRedisStoreRefusesAtOnceWhileDown(t *testing.T) {
	defer leakcheck.Check(t)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	b, err := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	startBus(t, b, newPositions())
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "e"}, []string{"op"})
	var down atomic.Bool
	s, err := NewRedis(Config{}, RedisDeps{Client: client, Bus: b, KeyPrefix: "t:", StoreErrors: errs, Down: down.Load})
	if err != nil {
		t.Fatal(err)
	}
	s.Start(context.Background())
	defer s.Close()
	pol := Policy{Size: 10, TTL: time.Minute}
	down.Store(true)
	for range 3 {
		if _, _, err := s.Publish(ctx, Publish{Topic: "room", Data: []byte(`1`), Policy: pol}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("publish while down: %v, want ErrUnavailable", err)
		}
	}
	if n := testutil.ToFloat64(errs.WithLabelValues("publish")); n != 3 {
		t.Errorf("%v publish errors counted, want 3", n)
	}
	if _, meta := s.keys("room"); client.Exists(ctx, meta).Val() != 0 {
		t.Error("a refused publish reached Redis")
	}
	down.Store(false)
	if pos, _, err := s.Publish(ctx, Publish{Topic: "room", Data: []byte(`1`), Policy: pol}); err != nil || pos.Offset != 1 {
		t.Fatalf("publish once reachable: %+v %v", pos, err)
	}
}
