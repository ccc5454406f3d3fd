package rtserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
)

// Embedding rtserver: a node with one message-tier class, an application
// RPC handler, served on a listener of our own, and a client calling it.
func Example() {
	cfg := rtserver.DefaultConfig()
	cfg.Drain.Duration = 100 * time.Millisecond
	// admission.classes and admission.methods: chat.* may be called twice
	// per minute per user (anonymous users are keyed by IP).
	cfg.Admission.Classes = map[string]message.Rule{
		"chat": {Rate: &message.Rate{Limit: 2, Per: time.Minute, By: "user"}},
	}
	cfg.Admission.Methods = map[string]string{"chat.*": "chat"}

	node, err := rtserver.New(cfg, rtserver.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	node.Handle("chat.say", func(ctx context.Context, r *server.Request) (any, error) {
		var p struct{ Text string }
		if err := json.Unmarshal(r.Params, &p); err != nil || p.Text == "" {
			return nil, protocol.NewError(protocol.CodeInvalidParams, "text is required", nil)
		}
		// Fan the message out to every subscriber of the room, fleet-wide.
		msg, _ := json.Marshal(map[string]string{"text": p.Text})
		if err := node.Publish("room:lobby", msg); err != nil {
			return nil, err // answered -32603, without the text
		}
		return map[string]bool{"sent": true}, nil
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()

	c, err := client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", nil)
	if err != nil {
		panic(err)
	}
	got := make(chan string, 1)
	if _, err := c.Subscribe(context.Background(), "room:lobby", func(topic string, data json.RawMessage) {
		got <- topic + " " + string(data)
	}); err != nil {
		panic(err)
	}

	var res struct{ Sent bool }
	err = c.Call(context.Background(), "chat.say", map[string]string{"text": "hello"}, &res)
	fmt.Println("sent:", res.Sent, err)
	fmt.Println(<-got)

	var perr *protocol.Error
	err = c.Call(context.Background(), "chat.say", map[string]string{}, nil)
	fmt.Println(errors.As(err, &perr), perr.Code, perr.Message)

	err = c.Call(context.Background(), "chat.say", map[string]string{"text": "again"}, nil)
	errors.As(err, &perr)
	var data protocol.RateLimitedData
	_ = json.Unmarshal(perr.Data.(json.RawMessage), &data)
	fmt.Println(perr.Code, perr.Message, data.Class, data.Limit, data.RetryAfterMs > 0)

	c.Close()
	fmt.Println("shutdown:", node.Shutdown(context.Background())) // drains, then returns
	fmt.Println("serve:", <-done)
	// Output:
	// sent: true <nil>
	// room:lobby {"text":"hello"}
	// true -32602 text is required
	// -32002 RATE_LIMITED chat 2 true
	// shutdown: <nil>
	// serve: http: Server closed
}
