package history

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/redistest"
)

// BenchmarkRedisStorePublish measures history publishes per second
// through the Redis store into a local redis-server: 100 topics, 64
// publishes in flight on each (the store's pipelining writer batches
// them), 100-byte messages, every one also published on the bus.
//
//	go test -run '^$' -bench BenchmarkRedisStorePublish -benchtime 50000x ./history
func BenchmarkRedisStorePublish(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	defer client.Close()
	bb, err := bus.NewRedis(bus.RedisOptions{Client: client, ChannelPrefix: "b:", InstanceID: "a"})
	if err != nil {
		b.Fatal(err)
	}
	store, err := NewRedis(RedisOptions{Client: client, Bus: bb, KeyPrefix: "b:"})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	pol := Policy{Size: 1000, TTL: time.Minute}
	data := []byte(`"` + string(make([]byte, 98)) + `"`)
	for i := range data[1 : len(data)-1] {
		data[i+1] = 'x'
	}
	const topics, inFlight = 100, 64
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for t := range topics {
		for range inFlight {
			wg.Go(func() {
				p := Publish{Topic: fmt.Sprint("room:", t), Data: data, Policy: pol}
				for left.Add(-1) >= 0 {
					if _, _, err := store.Publish(ctx, p); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "publishes/s")
}
