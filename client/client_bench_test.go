package client

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/rtserver/rtserver/protocol"
)

// BenchmarkCall is one echo round trip over loopback TCP, test server
// included: a ceiling for rtbench's per-call client overhead.
func BenchmarkCall(b *testing.B) {
	s := newTestServer(&testing.T{})
	defer s.srv.Close()
	c, err := Dial(context.Background(), s.url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	params := json.RawMessage(`{"n":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, "echo", params, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandleMessage is the client's cost per received message
// notification: decode, hand-off to the dispatcher, handler lookup and call.
func BenchmarkHandleMessage(b *testing.B) {
	benchHandle(b, protocol.AppendMessage(nil, "room.1", json.RawMessage(`{"user":"u1","text":"hello there"}`)), 1)
}

// BenchmarkHandleBatch10 is the same for a server batch frame of 10
// messages, reported per message.
func BenchmarkHandleBatch10(b *testing.B) {
	frame := []byte{'['}
	for i := range 10 {
		if i > 0 {
			frame = append(frame, ',')
		}
		frame = protocol.AppendMessage(frame, "room.1", json.RawMessage(`{"user":"u1","text":"hello there"}`))
	}
	benchHandle(b, append(frame, ']'), 10)
}

func benchHandle(b *testing.B, frame []byte, perFrame int) {
	c := &Client{opts: (*Options)(nil).withDefaults(), deliver: make(chan delivery, deliverBuffer), subs: map[string]*Subscription{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	defer c.cancel()
	n := 0
	c.subs["room.1"] = &Subscription{c: c, topic: "room.1", h: func(string, json.RawMessage) { n++ }}
	c.wg.Add(1)
	go c.dispatch()
	cn := &conn{pending: map[uint64]chan response{}}
	b.ReportAllocs()
	for b.Loop() {
		c.handleFrame(cn, frame)
	}
	close(c.deliver)
	c.wg.Wait()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perFrame), "ns/msg")
	if n != b.N*perFrame {
		b.Fatalf("delivered %d of %d", n, b.N*perFrame)
	}
}

func BenchmarkEncodeRequest(b *testing.B) {
	p := publishParams{Topic: "room.1", Data: json.RawMessage(`{"user":"u1","text":"hello there"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeRequest(42, "publish", p); err != nil {
			b.Fatal(err)
		}
	}
}
