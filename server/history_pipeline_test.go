package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

// startRedisHistoryServer runs a server on the Redis bus with the Redis
// history store on a real redis-server.
func startRedisHistoryServer(t *testing.T, srv *redistest.Server) (*Server, string) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	m := metrics.NewDiscard()
	b, err := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "t:", InstanceID: "a", HMACSecret: []byte("k"), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	store, err := history.NewRedis(history.Config{}, history.RedisDeps{Client: client, Bus: b, KeyPrefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	store.Start(context.Background())
	t.Cleanup(func() { _ = store.Close() })
	opts := historyOptions(store, history.Policy{Size: 1000, TTL: time.Minute})
	opts.Bus, opts.Metrics = b, m
	return startServer(t, opts)
}

// One connection's history publishes are in flight together (its read
// goroutine does not wait for each round trip to Redis), and their answers
// come in the order of their offsets, which follow the order they were
// sent.
func TestHistoryPublishesArePipelined(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	s, url := startRedisHistoryServer(t, srv)
	t.Cleanup(func() { _, _ = srv.Do("CLIENT", "UNPAUSE") })
	pub := wstest.Dial(t, url)
	resultPos(t, pub.Call("publish", `{"topic":"h:p","data":0}`))

	// Redis holds every write: the publishes wait for it, together.
	if _, err := srv.Do("CLIENT", "PAUSE", "60000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 1; i <= n; i++ {
		pub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"publish","params":{"topic":"h:p","data":%d}}`, 1000+i, i))
	}
	// A call behind them on the same connection is answered while Redis
	// still holds them: the read goroutine went past all of them.
	pub.Send(`{"jsonrpc":"2.0","id":"behind","method":"unsubscribe","params":{"topic":"x"}}`)
	if f := pub.Recv(); string(f.ID) != `"behind"` {
		t.Fatalf("first answer while Redis holds the publishes: %s %s", f.ID, f.Result)
	}
	if _, err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	var last uint64 = 1
	for i := 1; i <= n; i++ {
		var f wstest.Frame
		for f = pub.Recv(); f.ID == nil; f = pub.Recv() {
		}
		if id, _ := strconv.Atoi(string(f.ID)); id != 1000+i {
			t.Fatalf("answer %d is to id %s", i, f.ID)
		}
		p := resultPos(t, f)
		if p.Offset != last+1 {
			t.Fatalf("answer %d: offset %d after %d", i, p.Offset, last)
		}
		last = p.Offset
	}
	// And the data of each offset is what was sent in that order.
	res, err := s.History(t.Context(), "h:p", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Messages []struct {
			Offset uint64          `json:"offset"`
			Data   json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(res, &h); err != nil || len(h.Messages) != n+1 {
		t.Fatalf("history %s: %v", res, err)
	}
	for _, m := range h.Messages {
		if want := strconv.FormatUint(m.Offset-1, 10); strings.TrimSpace(string(m.Data)) != want {
			t.Fatalf("offset %d holds %s, want %s", m.Offset, m.Data, want)
		}
	}
}
