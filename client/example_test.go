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
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/protocol"
)

// startNode runs a single-instance rtserver on a free loopback port and
// returns its WebSocket URL and a function that drains and stops it.
func startNode() (url string, stop func()) {
	return serveNode(rtserver.DefaultConfig())
}

// serveNode runs a node of cfg as startNode says.
func serveNode(cfg rtserver.Config) (url string, stop func()) {
	cfg.Drain.Duration = 50 * time.Millisecond
	node, err := rtserver.New(cfg, rtserver.Deps{Logger: slog.New(slog.DiscardHandler)})
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

// startHistoryNode is startNode with room:* keeping presence and the last
// 100 messages of each room for 5 minutes (docs/history.md,
// docs/presence.md).
func startHistoryNode() (url string, stop func()) {
	cfg := rtserver.DefaultConfig()
	cfg.Topics.Namespaces = []access.Namespace{{Pattern: "room:*", Rule: access.Rule{
		Subscribe: []string{access.GrantAny}, Publish: []string{access.GrantAny},
		Presence: true, History: history.Policy{Size: 100, TTL: 5 * time.Minute},
	}}}
	return serveNode(cfg)
}

// Read what a history topic stored, then subscribe from where the read
// ended: nothing published in between is missed, nothing comes twice.
func ExampleClient_History() {
	url, stop := startHistoryNode()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, url, nil) // nil: DefaultOptions, reconnecting
	if err != nil {
		panic(err)
	}
	defer c.Close()

	for _, text := range []string{"one", "two", "three"} {
		if _, err := c.PublishAt(ctx, "room:1", text); err != nil { // stored, retried safely
			panic(err)
		}
	}
	page, err := c.History(ctx, "room:1", client.Position{}, 2) // the newest 2
	if err != nil {
		panic(err)
	}
	for _, m := range page.Messages {
		fmt.Println(m.Offset, string(m.Data))
	}

	got := make(chan client.Message, 1)
	since := client.Position{Epoch: page.Epoch, Offset: page.Offset}
	if _, err := c.SubscribeSince(ctx, "room:1", since, func(m client.Message) { got <- m }); err != nil {
		panic(err)
	}
	if _, err := c.PublishAt(ctx, "room:1", "four"); err != nil {
		panic(err)
	}
	m := <-got
	fmt.Println(m.Offset, string(m.Data))
	// Output:
	// 2 "two"
	// 3 "three"
	// 4 "four"
}

// Who is in a room: every connection subscribed to it, fleet-wide, and
// the counts.
func ExampleClient_PresenceAll() {
	url, stop := startHistoryNode()
	defer stop()
	ctx := context.Background()
	var clients []*client.Client
	for range 2 {
		c, err := client.Dial(ctx, url, nil)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		if _, err := c.Subscribe(ctx, "room:1", func(string, json.RawMessage) {}); err != nil {
			panic(err)
		}
		clients = append(clients, c)
	}
	entries, err := clients[0].PresenceAll(ctx, "room:1")
	if err != nil {
		panic(err)
	}
	stats, err := clients[0].PresenceStats(ctx, "room:1")
	if err != nil {
		panic(err)
	}
	fmt.Println(len(entries), "connections;", stats.Clients, "connections,", stats.Users, "user (anonymous)")
	// Output:
	// 2 connections; 2 connections, 1 user (anonymous)
}
