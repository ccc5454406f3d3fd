package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/protocol"
)

// startNode runs a single-instance rtserver on a free loopback port and
// returns its WebSocket URL and a function that drains and stops it.
func startNode() (url string, stop func()) {
	cfg := rtserver.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Drain.Duration = 50 * time.Millisecond
	node, err := rtserver.New(cfg)
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go node.Serve(ln)
	return "ws://" + ln.Addr().String() + "/ws", func() { node.Shutdown(context.Background()) }
}

// Subscribe, publish, and read the server's errors.
func Example() {
	url, stop := startNode()
	defer stop()
	ctx := context.Background()

	// DefaultOptions reconnects with full-jitter backoff, honours the
	// server's retry hints and resubscribes after every reconnect.
	c, err := client.Dial(ctx, url, client.DefaultOptions())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	got := make(chan string, 1)
	sub, err := c.Subscribe(ctx, "room:1", func(topic string, data json.RawMessage) {
		got <- topic + " " + string(data)
	})
	if err != nil {
		panic(err)
	}
	if err := c.Publish(ctx, "room:1", map[string]string{"text": "hi"}); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	_ = sub.Unsubscribe(ctx)

	// Errors are *protocol.Error: switch on the code.
	err = c.Call(ctx, "no.such.method", nil, nil)
	var perr *protocol.Error
	if errors.As(err, &perr) {
		fmt.Println(perr.Code, perr.Message)
	}
	err = c.Publish(ctx, "__reserved", 1) // refused locally, as the server would
	if errors.As(err, &perr) {
		fmt.Println(perr.Code)
	}
	// Output:
	// room:1 {"text":"hi"}
	// -32601 method not found
	// -32602
}

// Watch the connection: system notifications (degraded, recovered,
// draining) and state changes. Here the server drains, so the client hears
// "draining" and then loses the connection with 1012.
func ExampleOptions() {
	url, stop := startNode()
	events := make(chan string, 8)
	c, err := client.Dial(context.Background(), url, &client.Options{
		OnSystem: func(event string, params json.RawMessage) { events <- "system " + event },
		OnState: func(s client.State, err error) {
			var ce *client.CloseError
			if errors.As(err, &ce) {
				events <- fmt.Sprintf("%v %d retry hint: %v", s, ce.Code, ce.RetryAfter > 0)
			}
		},
		// Reconnect: true (as in DefaultOptions) would dial again here,
		// no sooner than the 1012's retry_after_ms.
	})
	if err != nil {
		panic(err)
	}
	stop()
	<-c.Done()
	c.Close() // returns once every handler has run
	close(events)
	var got []string
	for e := range events {
		got = append(got, e)
	}
	sort.Strings(got) // handlers and state changes run on different goroutines
	fmt.Println(strings.Join(got, "\n"))
	// Output:
	// closed 1012 retry hint: true
	// system draining
}
