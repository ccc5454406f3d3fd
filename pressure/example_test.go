package pressure_test

import (
	"fmt"
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// A monitor on a fake clock: record traffic, take a sample, read the
// snapshot the message tier reads on every call.
func Example() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := pressure.DefaultConfig()
	cfg.MemoryHeapUsedRatio = 0 // off: this example's memory is not the point
	cfg.PublishRatePerSec = 100
	cfg.TopicPublishRatePerSec = 50
	cfg.Now = func() time.Time { return now }
	// Connection and subscription counts come from the server, handed
	// over by Start(ctx, counts); without them SUBSCRIBERS never rises.
	mon, err := pressure.New(cfg, pressure.Deps{})
	if err != nil {
		panic(err)
	}

	mon.OnReasonChange(func(old, new pressure.Reason) { fmt.Println("reason:", old, "->", new) })
	mon.OnTopicHot(func(t pressure.TopicRate, hot bool) { fmt.Println("hot:", t.Topic, hot) })

	// One second of traffic: 120 attempts on room:1, 30 on room:2, of
	// 100 bytes each, all published.
	for range 120 {
		mon.RecordAttempt("room:1", "alice", 100)
	}
	for range 30 {
		mon.RecordAttempt("room:2", "bob", 100)
	}
	mon.RecordPublished(150)
	now = now.Add(time.Second)
	mon.Sample() // Run does this every SampleInterval

	s := mon.Snapshot()
	fmt.Println(s.Reason, s.PublishRate)
	for _, t := range s.TopTopics {
		fmt.Println(t.Topic, t.MessagesPerSec, t.BytesPerSec)
	}
	fmt.Println("alice:", s.RateOfUser("alice"))
	// Output:
	// reason: NONE -> PUBLISH_RATE
	// hot: room:1 true
	// PUBLISH_RATE 150
	// room:1 120 12000
	// room:2 30 3000
	// alice: 120
}
