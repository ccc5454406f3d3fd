package pressure_test

import (
	"fmt"

	"github.com/rtserver/rtserver/pressure"
)

// A monitor: record traffic, take a sample, read the snapshot the message
// tier reads on every call. Rates are per second of the interval since
// the last sample: here, a moment, so every rate is high and only their
// proportions are printed.
func Example() {
	cfg := pressure.DefaultConfig()
	cfg.MemoryHeapUsedRatio = 0 // off: this example's memory is not the point
	cfg.PublishRatePerSec = 10
	cfg.TopicPublishRatePerSec = 0 // off: both topics would be hot
	// Connection and subscription counts come from the server, as
	// AddConnections and AddSubscriptions; without them SUBSCRIBERS never
	// rises.
	mon, err := pressure.New(cfg, pressure.Deps{})
	if err != nil {
		panic(err)
	}

	mon.OnReasonChange(func(old, new pressure.Reason) { fmt.Println("reason:", old, "->", new) })

	// One second of traffic: 120 attempts on room:1, 30 on room:2, of
	// 100 bytes each, all published.
	for range 120 {
		mon.RecordAttempt("room:1", "alice", 100)
	}
	for range 30 {
		mon.RecordAttempt("room:2", "bob", 100)
	}
	mon.RecordPublished(150)
	mon.Sample() // Start does this every SampleInterval

	s := mon.Snapshot()
	fmt.Println(s.Reason)
	for _, t := range s.TopTopics {
		fmt.Printf("%s: %.0f%% of the publishes, %.0f bytes each\n", t.Topic, 100*t.MessagesPerSec/s.PublishRate, t.BytesPerSec/t.MessagesPerSec)
	}
	fmt.Printf("alice: %.0f%%\n", 100*s.RateOfUser("alice")/s.PublishRate)
	// Output:
	// reason: NONE -> PUBLISH_RATE
	// PUBLISH_RATE
	// room:1: 80% of the publishes, 100 bytes each
	// room:2: 20% of the publishes, 100 bytes each
	// alice: 80%
}
