package history

import (
	"context"
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
	store, err := NewRedis(Config{}, RedisDeps{Client: client, Bus: bb, KeyPrefix: "b:"})
	if err != nil {
		b.Fatal(err)
	}
	store.Start(context.Background())
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

// BenchmarkVerifyOffsetOnReceipt measures what checking each received
// history message's offset against the stream would cost an instance:
// one LINDEX of the topic's list per message, pipelined 128 at a time as
// a receiving goroutine could batch them, beside the publish itself
// (BenchmarkRedisStorePublish). Every instance would pay it for every
// message of every history topic it has subscribers for, so Redis would
// serve one such read per message per instance.
//
//	go test -run '^$' -bench BenchmarkVerifyOffsetOnReceipt -benchtime 50000x ./history
func BenchmarkVerifyOffsetOnReceipt(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	defer client.Close()
	const topics = 100
	for t := range topics {
		for i := range 100 {
			client.LPush(ctx, fmt.Sprint("b:h:l:room:", t), fmt.Sprint(i+1, " 1700000000000 x"))
		}
	}
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; {
		n := min(128, b.N-done)
		cmds := make([]*redis.StringCmd, n)
		_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range n {
				cmds[i] = p.LIndex(ctx, fmt.Sprint("b:h:l:room:", (done+i)%topics), int64(i%100))
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
}
