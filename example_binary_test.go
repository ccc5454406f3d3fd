package rtserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
)

// Bytes as bytes: a collaborative editor's update (a CRDT speaks bytes)
// published on the binary protocol reaches a binary subscriber as the
// same bytes and a JSON subscriber in their JSON form, {"$bin": base64}
// (docs/protocol.md, "The binary protocol").
func Example_binary() {
	cfg := rtserver.DefaultConfig()
	cfg.Drain.Duration = 100 * time.Millisecond
	node, err := rtserver.New(cfg, rtserver.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()
	url := "ws://" + ln.Addr().String() + "/ws"
	ctx := context.Background()

	editor, err := client.Dial(ctx, url, &client.Options{Binary: true})
	if err != nil {
		panic(err)
	}
	viewer, err := client.Dial(ctx, url, nil) // JSON
	if err != nil {
		panic(err)
	}
	updates := make(chan string, 2)
	if _, err := editor.Subscribe(ctx, "doc:42", func(_ string, data json.RawMessage) {
		b, _ := client.BytesOf(data)
		updates <- fmt.Sprintf("binary client: % x", b)
	}); err != nil {
		panic(err)
	}
	if _, err := viewer.Subscribe(ctx, "doc:42", func(_ string, data json.RawMessage) {
		updates <- "JSON client:   " + string(data)
	}); err != nil {
		panic(err)
	}

	update := client.Bytes{0x01, 0x8f, 0x00, 0xff} // an encoded CRDT update
	if err := editor.Publish(ctx, "doc:42", update); err != nil {
		panic(err)
	}
	got := []string{<-updates, <-updates}
	if got[0] > got[1] {
		got[0], got[1] = got[1], got[0]
	}
	fmt.Println(got[0])
	fmt.Println(got[1])

	editor.Close()
	viewer.Close()
	fmt.Println("shutdown:", node.Shutdown(ctx))
	<-done
	// Output:
	// JSON client:   {"$bin":"AY8A/w=="}
	// binary client: 01 8f 00 ff
	// shutdown: <nil>
}
