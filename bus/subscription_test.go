package bus

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// TestSubscriptionGatherLosesNothing: with Gather, what arrives while the
// loop waits is handed over afterwards, every message, in order; Close
// during a wait returns without waiting it out.
func TestSubscriptionGatherLosesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	var mu sync.Mutex
	var got []string
	sub := Subscribe(SubscriptionConfig{
		Client: c, Channel: "gather", Gather: time.Hour, // one wait, for the rest of the test
		Handle: func(p string) { mu.Lock(); got = append(got, p); mu.Unlock() },
	})
	t.Cleanup(sub.Close)
	<-sub.Ready()
	ctx := context.Background()
	if err := c.Publish(ctx, "gather", "first").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the first message, which starts the wait", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	})
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprint(i))
		if err := c.Publish(ctx, "gather", want[i]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(got) != 1 {
		t.Errorf("%d messages handed over during the wait, want none", len(got)-1)
	}
	mu.Unlock()
	sub.Close() // returns at once, not after the hour

	// A short wait hands over everything, in order.
	got = nil
	sub2 := Subscribe(SubscriptionConfig{
		Client: c, Channel: "gather", Gather: 20 * time.Millisecond,
		Handle: func(p string) { mu.Lock(); got = append(got, p); mu.Unlock() },
	})
	t.Cleanup(sub2.Close)
	<-sub2.Ready()
	for _, p := range want {
		if err := c.Publish(ctx, "gather", p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "every message, in order", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(got, want)
	})
}

// holdProxy forwards one TCP connection at a time to a Redis server,
// counting the PINGs the client sends; while hold is on it keeps what
// Redis answers instead of passing it on, and release passes on what it
// kept. A Redis that answers late, without any clock.
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	hold   bool
	held   []byte
	client net.Conn
	pings  int
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.client = c
			p.mu.Unlock()
			t.Cleanup(func() { c.Close(); r.Close() })
			wg.Go(func() { // client -> Redis, counting PINGs
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						r.Close()
						return
					}
					p.mu.Lock()
					p.pings += strings.Count(strings.ToLower(string(buf[:n])), "ping\r\n")
					p.mu.Unlock()
					if _, err := r.Write(buf[:n]); err != nil {
						return
					}
				}
			})
			wg.Go(func() { // Redis -> client, held while hold is on
				buf := make([]byte, 4096)
				for {
					n, err := r.Read(buf)
					if err != nil {
						c.Close()
						return
					}
					p.mu.Lock()
					if p.hold {
						p.held = append(p.held, buf[:n]...)
						p.mu.Unlock()
						continue
					}
					p.mu.Unlock()
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			})
		}
	})
	return p
}

func (p *holdProxy) setHold() {
	p.mu.Lock()
	p.hold, p.pings = true, 0
	p.mu.Unlock()
}

func (p *holdProxy) pingsSeen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pings
}

func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = false
	_, _ = p.client.Write(p.held)
	p.held = nil
}

// TestSubscriptionToleratesALatePong: a PING of an idle subscription
// answered only after its timeout (Redis slow, or this process starved of
// CPU) is asked again rather than taken for a dead connection: with the
// answers held until the second PING went out, the subscription never
// goes down, and its connection still delivers.
func TestSubscriptionToleratesALatePong(t *testing.T) {
	srv := redistest.Start(t)
	px := startHoldProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: px.ln.Addr().String(), PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	var mu sync.Mutex
	var states []bool
	var got []string
	sub := Subscribe(SubscriptionConfig{
		Client: c, Channel: "late", IdleAfter: 20 * time.Millisecond, PingTimeout: time.Second,
		Handle:  func(p string) { mu.Lock(); got = append(got, p); mu.Unlock() },
		OnState: func(up bool) { mu.Lock(); states = append(states, up); mu.Unlock() },
	})
	t.Cleanup(sub.Close)
	<-sub.Ready()
	px.setHold()
	testkit.Eventually(t, 10*time.Second, "a second PING while the first is unanswered", func() bool { return px.pingsSeen() >= 2 })
	px.release()
	pub := newClient(t, srv.Addr)
	if err := pub.Publish(context.Background(), "late", "after").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the message after the late answers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, "after")
	})
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 0 {
		t.Errorf("the subscription went %v, want never down", states)
	}
}
