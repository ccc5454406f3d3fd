package publishrate

import (
	"context"
	"crypto/tls"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// Short intervals so the real-Redis tests finish quickly; conditions are
// awaited, never slept on.
const (
	testInterval = 100 * time.Millisecond
	testStale    = 300 * time.Millisecond
	awaitFor     = 15 * time.Second
)

type node struct {
	agg *Aggregator
	m   *metrics.Metrics
}

func newNode(t *testing.T, srv *redistest.Server, id string, local Local, secret []byte) node {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	m := metrics.NewDiscard()
	a, err := New(Options{
		PublishInterval: testInterval, StaleAfter: testStale, Mode: ModeBroadcast, HMACSecret: secret,
	}, Deps{
		Client: c, Local: local, InstanceID: id, Metrics: m, Logger: discardLog,
		Breaker: NewBreaker(3, testInterval, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return node{a, m}
}

func activate(t *testing.T, a *Aggregator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitFor)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClusterOfThreeOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	secret := []byte("cluster-secret")
	hot := func() Local {
		return newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 600, BytesPerSec: 60})
	}
	a := newNode(t, srv, "A", hot(), secret)
	b := newNode(t, srv, "B", hot(), secret)
	c := newNode(t, srv, "C", newFakeLocal(), secret)
	for _, n := range []node{c, a, b} {
		activate(t, n.agg)
	}

	testkit.Eventually(t, awaitFor, "C sees A and B: RateOf(hot) = 1200, 2 instances", func() bool {
		return c.agg.RateOf("hot") == 1200 && value(c.m.ClusterInstances) == 2
	})
	if top := c.agg.TopPublishers(); len(top) != 1 || top[0] != (Entry{"hot", 1200, 120, 2}) {
		t.Errorf("C TopPublishers = %v", top)
	}
	testkit.Eventually(t, awaitFor, "A sees itself and B: RateOf(hot) = 1200, 2 instances", func() bool {
		return a.agg.RateOf("hot") == 1200 && value(a.m.ClusterInstances) == 2
	})
	if value(c.m.ClusterParseErrors) != 0 || value(a.m.ClusterBroadcasts) == 0 {
		t.Errorf("parse errors %v, A broadcasts %v", value(c.m.ClusterParseErrors), value(a.m.ClusterBroadcasts))
	}

	// B stops broadcasting: C forgets it within StaleAfter + one interval.
	b.agg.Close()
	testkit.Eventually(t, awaitFor, "C drops B", func() bool {
		return c.agg.RateOf("hot") == 600 && value(c.m.ClusterInstances) == 1
	})

	// Redis restarts: the subscribers reconnect, broadcasts resume.
	srv.Restart()
	before := c.agg.Stats().Received
	broadcasts := a.agg.Stats().Broadcasts
	testkit.Eventually(t, awaitFor, "C receives from A again after the restart", func() bool {
		return c.agg.Stats().Received > before+2 && a.agg.Stats().Broadcasts > broadcasts
	})
	testkit.Eventually(t, awaitFor, "C's view of A recovers", func() bool {
		return c.agg.RateOf("hot") == 600 && value(c.m.ClusterInstances) == 1
	})
}

func TestForgedSiblingOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newNode(t, srv, "C", newFakeLocal(), []byte("right"))
	rogue := newNode(t, srv, "R", newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 1e6}), []byte("wrong"))
	activate(t, c.agg)
	activate(t, rogue.agg)
	testkit.Eventually(t, awaitFor, "C counts the rogue's envelopes as parse errors", func() bool {
		return value(c.m.ClusterParseErrors) >= 2
	})
	if c.agg.RateOf("hot") != 0 || value(c.m.ClusterReceived) != 0 {
		t.Errorf("forged envelope accepted: RateOf %v received %v", c.agg.RateOf("hot"), value(c.m.ClusterReceived))
	}
}

func TestStartCloseIdempotentNoLeak(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, srv, "A", newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 1}), nil)
	peer := newNode(t, srv, "B", newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 2}), nil)
	activate(t, peer.agg)

	base := runtime.NumGoroutine()
	n.agg.Close() // inactive: nothing to stop
	for range 3 {
		activate(t, n.agg)
		activate(t, n.agg) // already active: nothing more starts
		testkit.Eventually(t, awaitFor, "A hears B", func() bool { return n.agg.RateOf("hot") == 3 })
		if got := runtime.NumGoroutine(); got > base+2 {
			t.Errorf("%d goroutines while active, want at most %d", got, base+2)
		}
		n.agg.Close()
		n.agg.Close()
		if got := n.agg.RateOf("hot"); got != 1 {
			t.Errorf("after Close RateOf = %v, want the local 1 only", got)
		}
		if got := n.agg.Stats().Instances; got != 0 {
			t.Errorf("after Close %d siblings held", got)
		}
		testkit.Eventually(t, awaitFor, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
	}
}

// A Start that Redis does not answer in time returns nil, and the
// aggregator keeps subscribing: it becomes active once Redis is back,
// without another Start. A Close before Redis answers ends the attempt.
func TestStartSubscribesInTheBackgroundWhileRedisIsDown(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	n := newNode(t, srv, "A", newFakeLocal(), nil)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := n.agg.Start(ctx); err != nil {
		t.Fatalf("Start with Redis down = %v, want nil: it runs on", err)
	}
	if isActive(n.agg) {
		t.Fatal("active before Redis confirmed the subscription")
	}
	srv.Restart()
	testkit.Eventually(t, awaitFor, "active once Redis is back", func() bool { return isActive(n.agg) })
	n.agg.Close()
	if isActive(n.agg) {
		t.Fatal("active after Close")
	}

	srv.Stop()
	if err := n.agg.Start(ctx); err != nil { // ctx has ended: Start returns at once
		t.Fatal(err)
	}
	n.agg.Close()
	if isActive(n.agg) {
		t.Fatal("active after a Close that came before Redis answered")
	}
}

// isActive reports whether a has started its loops.
func isActive(a *Aggregator) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.active
}

// TestSubscriptionHasItsOwnPolledClient: on a plain client the
// subscription dials through a client of its own (its connection polled,
// internal/pollconn), which Close closes, leaving no subscriber on
// Redis; Start again works as the first time.
func TestSubscriptionHasItsOwnPolledClient(t *testing.T) {
	srv := redistest.Start(t)
	a := newNode(t, srv, "A", newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 5}), nil)
	b := newNode(t, srv, "B", newFakeLocal(), nil)
	activate(t, a.agg)
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer probe.Close()
	subscribers := func() int64 {
		n, err := probe.PubSubNumSub(context.Background(), a.agg.opts.Channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[a.agg.opts.Channel]
	}
	for range 2 {
		activate(t, b.agg)
		if b.agg.subClient == nil || redis.UniversalClient(b.agg.subClient) == b.agg.client {
			t.Fatal("the subscription shares the aggregator's client")
		}
		testkit.Eventually(t, awaitFor, "B sees A's rate", func() bool { return b.agg.RateOf("hot") == 5 })
		b.agg.Close()
		if b.agg.subClient != nil {
			t.Fatal("Close kept the subscription's client")
		}
		testkit.Eventually(t, awaitFor, "only A subscribed", func() bool { return subscribers() == 1 })
	}
}

// TestTLSClientKeepsTheGatherWait: pollconn leaves TLS connections
// alone, so over TLS the subscription shares the client and keeps the
// Gather wait instead.
func TestTLSClientKeepsTheGatherWait(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", TLSConfig: &tls.Config{}})
	defer c.Close()
	a, err := New(Options{}, Deps{Client: c, Local: newFakeLocal(), InstanceID: "A", Metrics: metrics.NewDiscard(), Logger: discardLog})
	if err != nil {
		t.Fatal(err)
	}
	if sc := a.subscriptionClient(); sc != nil {
		sc.Close()
		t.Fatal("a TLS client got a polled subscription client")
	}
}
