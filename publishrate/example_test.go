package publishrate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
)

// Before Start (and without Redis traffic) the aggregator answers from
// this instance's own pressure samples, so a clusterTopPublisher rule works
// from the start. New does no I/O.
func ExampleAggregator_RateOf() {
	mon, _ := pressure.New(pressure.DefaultConfig(), pressure.Deps{}) // a valid configuration: no error

	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // not dialled until Start
	defer client.Close()
	agg, err := publishrate.New(publishrate.DefaultOptions(), publishrate.Deps{Client: client, Local: mon, InstanceID: "node-a"})
	if err != nil {
		panic(err)
	}

	for range 40 {
		mon.RecordAttempt("room:1", "alice", 10)
	}
	mon.Sample() // rates per second since the monitor was made

	fmt.Println(agg.RateOf("room:1") > 0, agg.RateOfUser("alice") == agg.RateOf("room:1"), agg.RateOf("room:2"))
	for _, e := range agg.TopPublishers() {
		fmt.Printf("%s %.0f bytes each, %d instance\n", e.Topic, e.BytesPerSec/e.MessagesPerSec, e.ContributingInstances)
	}
	// Output:
	// true true 0
	// room:1 10 bytes each, 1 instance
}

// A fleet member: activate the aggregator on Redis and let the message
// tier's clusterTopPublisher rules read the cluster-wide view. (Not run:
// it needs a Redis server.)
func ExampleAggregator_Start() {
	ctx := context.Background()
	mon, _ := pressure.New(pressure.DefaultConfig(), pressure.Deps{})
	_ = mon.Start(ctx)
	defer mon.Close()

	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	agg, err := publishrate.New(publishrate.Options{
		Channel:         "tenant-a:pressure:rates", // one channel per fleet
		PublishInterval: 5 * time.Second,
		StaleAfter:      12 * time.Second,
		HMACSecret:      []byte("shared by every instance of the fleet"),
	}, publishrate.Deps{Client: client, Local: mon})
	if err != nil {
		panic(err)
	}
	// Start waits for Redis to confirm the subscription, at most until
	// its ctx ends; then it keeps subscribing in the background.
	startCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := agg.Start(startCtx); err != nil {
		panic(err)
	}
	defer agg.Close()

	_, err = message.New(message.Config{Classes: map[string]message.Rule{"broadcast": {
		ClusterTopPublisher: &message.ClusterTopPublisher{Threshold: 1000, By: "topic"},
	}}}, message.Deps{Snapshot: mon.Snapshot, Rates: agg})
	if err != nil {
		panic(err)
	}
	fmt.Println(agg.Stats().Instances, "siblings in view")
}

// The breaker that guards broadcasts: open after a run of failures, one
// probe after the cool-down.
func ExampleConsecutiveBreaker() {
	now := time.Unix(0, 0)
	b := publishrate.NewBreaker(2, 10*time.Second, func() time.Time { return now })
	b.Failure()
	fmt.Println(b.Allow())
	b.Failure()
	fmt.Println(b.Allow(), b.Open())
	now = now.Add(10 * time.Second)
	fmt.Println(b.Allow(), b.Allow()) // one probe only
	b.Success()
	fmt.Println(b.Allow(), b.Open())
	// Output:
	// true
	// false true
	// true false
	// true false
}
