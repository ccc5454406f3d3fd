package bus_test

import (
	"context"
	"fmt"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/metrics"
)

// printer is a Receiver that prints what arrives from other instances.
type printer string

func (p printer) Deliver(topic string, data []byte) { fmt.Printf("%s got %s %s\n", p, topic, data) }
func (p printer) BusState(degraded bool)            { fmt.Printf("%s degraded=%v\n", p, degraded) }
func (p printer) Gap(topic string)                  { fmt.Printf("%s lost messages on %s\n", p, topic) }
func (p printer) DeliverControl(key string, data []byte) {
	fmt.Printf("%s got control %s %s\n", p, key, data)
}
func (p printer) DeliverNotice(key string, data []byte) {
	fmt.Printf("%s got notice %s %s\n", p, key, data)
}

// Two instances in one process on a MemoryBroker, as if they shared a
// Redis: what one publishes reaches the other, never itself (its own
// subscribers are served by its hub, not by the bus).
func ExampleMemoryBroker() {
	ctx := context.Background()
	broker := bus.NewMemoryBroker()
	m := metrics.NewDiscard() // each instance would have its own registry
	a, b := bus.NewMemory(broker, m), bus.NewMemory(broker, m)
	if err := a.Start(ctx, printer("a")); err != nil {
		panic(err)
	}
	if err := b.Start(ctx, printer("b")); err != nil {
		panic(err)
	}
	defer a.Close()
	defer b.Close()

	_ = a.Publish("room:1", []byte(`{"text":"hi"}`))
	_ = b.Publish("room:2", []byte(`42`))
	// Output:
	// b got room:1 {"text":"hi"}
	// a got room:2 42
}

// The sharded bus hashes each topic into one of N partitions, each carried
// on one shard channel that lives in a single Redis Cluster slot.
func ExamplePartition() {
	n := bus.Partition("room:1", 16)
	fmt.Println(n >= 0 && n < 16, bus.Partition("room:1", 16) == n)
	fmt.Println(bus.PartitionChannel("rt:", 7))
	// Output:
	// true true
	// {rt:p7}
}

// A fleet on one Redis server: the single-channel bus. Use NewSharded with
// the same RedisOptions for Redis Cluster. (Not run: it needs Redis.)
func ExampleNewRedis() {
	b, err := bus.NewRedis(bus.RedisOptions{
		URL:           "redis://127.0.0.1:6379",
		ChannelPrefix: "tenant-a:", // the channel is tenant-a:bus
	})
	if err != nil {
		panic(err)
	}
	// Start waits for Redis to confirm the subscription, or for the first
	// sign that Redis is down: then the bus is degraded and retries alone.
	if err := b.Start(context.Background(), printer("node-a")); err != nil {
		panic(err)
	}
	defer b.Close()
	fmt.Println(b.Channel(), b.Degraded())
}
