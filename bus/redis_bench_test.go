package bus

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/redistest"
)

// countingReceiver counts deliveries and says when target is reached.
type countingReceiver struct {
	n      atomic.Int64
	target atomic.Int64
	done   chan struct{}
}

func (r *countingReceiver) Deliver(string, []byte) {
	if r.n.Add(1) == r.target.Load() {
		r.done <- struct{}{}
	}
}
func (r *countingReceiver) BusState(bool)                          {}
func (r *countingReceiver) Gap(string)                             {}
func (r *countingReceiver) DeliverControl(key string, data []byte) { r.Deliver(key, data) }
func (r *countingReceiver) DeliverNotice(key string, data []byte)  { r.Deliver(key, data) }

// BenchmarkRedisThroughput publishes through a real redis-server from
// one bus, 64 publishers at once (each waits for Redis to take its
// message), and counts arrivals on a second: messages per second end to
// end, with the writers pipelining up to BatchSize PUBLISHes per round
// trip.
func BenchmarkRedisThroughput(b *testing.B) {
	for _, batch := range []int{1, 128} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			s := redistest.Start(b)
			c := newClient(b, s.Addr)
			oa := testOptions(c, "a")
			oa.BatchSize = batch
			oa.PingInterval = time.Second
			pub, _ := startRedis(b, oa)
			ob := testOptions(c, "b")
			ob.PingInterval = time.Second
			sub, err := NewRedis(ob)
			if err != nil {
				b.Fatal(err)
			}
			recv := &countingReceiver{done: make(chan struct{}, 1)}
			if err := sub.Start(context.Background(), recv); err != nil {
				b.Fatal(err)
			}
			defer sub.Close()
			data := []byte(`{"text":"hello, world","n":12345}`)

			b.ReportAllocs()
			recv.target.Store(int64(b.N))
			start := time.Now()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := pub.Publish("room", data); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			select {
			case <-recv.done:
			case <-time.After(time.Minute):
				b.Fatalf("received %d of %d (dropped slow_receiver %v)", recv.n.Load(), b.N, dropped(sub.e.m, DropSlowRecv))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

func BenchmarkEnvelopeDecode(b *testing.B) {
	env := string(appendEnvelope(nil, "instance-1", "chat:room-7", []byte(`{"text":"hello, world","n":12345}`)))
	b.ReportAllocs()
	for b.Loop() {
		topic, data, own, drop := decodeEnvelope(env, "instance-2", DefaultMaxEnvelopeBytes)
		if own || drop != "" || topic == "" || !validData([]byte(data)) {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkEnvelopeEncode(b *testing.B) {
	data := []byte(`{"text":"hello, world","n":12345}`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendEnvelope(buf[:0], "instance-1", "chat:room-7", data)
	}
}
