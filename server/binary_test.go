package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// Bytes published on the binary protocol reach binary subscribers as the
// same bytes, in a binary frame, and JSON subscribers in their JSON form;
// JSON data reaches binary subscribers as the same value.
func TestBinaryFanOutAcrossEncodings(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	bsub, jsub, bpub, jpub := wstest.DialBinary(t, url), wstest.Dial(t, url), wstest.DialBinary(t, url), wstest.Dial(t, url)
	for _, c := range []*wstest.Conn{bsub, jsub} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:1"}`))
	}
	raw := []byte{0, 1, 2, 0xfe, 0xff, '"', '\n'}
	wstest.MustOK(t, bpub.Call("publish", `{"topic":"room:1","data":`+string(protocol.AppendBytesJSON(nil, raw))+`}`))
	// The binary subscriber reads the frame itself: a bin of the bytes.
	typ, frame, err := bsub.WS.Read(context.Background())
	if err != nil || typ != websocket.MessageBinary {
		t.Fatalf("binary subscriber: %v %v", typ, err)
	}
	want, _ := protocol.AppendBinaryMessage(nil, "room:1", -1, protocol.AppendBytesJSON(nil, raw))
	if string(frame) != string(want) {
		t.Fatalf("binary subscriber got %x, want %x", frame, want)
	}
	if got := jsub.ExpectMessage("room:1"); got != `{"$bin":"AAEC/v8iCg=="}` {
		t.Fatalf("JSON subscriber got %s", got)
	}
	wstest.MustOK(t, jpub.Call("publish", `{"topic":"room:1","data":{"text":"hi","n":[1,2.5,-3]}}`))
	for _, c := range []*wstest.Conn{bsub, jsub} {
		var v map[string]any
		if err := json.Unmarshal([]byte(c.ExpectMessage("room:1")), &v); err != nil || v["text"] != "hi" || len(v["n"].([]any)) != 3 {
			t.Fatalf("binary %v: got %v (%v)", c.Binary, v, err)
		}
	}
}

// The binary protocol's errors are the JSON protocol's: a frame that is
// not MessagePack answers -32700, a bad call its error; a text frame
// closes a binary connection with 1003.
func TestBinaryErrorsAndTextFrame(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{}, Config{MaxSubscriptionsPerConn: 1})
	c := wstest.DialBinary(t, url)
	if err := c.WS.Write(context.Background(), websocket.MessageBinary, []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	if f := c.Recv(); f.Error == nil || f.Error.Code != protocol.CodeParseError {
		t.Fatalf("not MessagePack: %+v", f)
	}
	if f := c.Call("subscribe", `{"topic":"__x"}`); f.Error == nil || f.Error.Code != protocol.CodeInvalidParams {
		t.Fatalf("reserved topic: %+v", f)
	}
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"a"}`))
	if f := c.Call("subscribe", `{"topic":"b"}`); f.Error == nil || f.Error.Code != protocol.CodeLimitExceeded || string(f.Error.Data) != `{"limit":1}` {
		t.Fatalf("limit: %+v", f)
	}
	if f := c.Call("nope", `{}`); f.Error == nil || f.Error.Code != protocol.CodeMethodNotFound {
		t.Fatalf("unknown method: %+v", f)
	}
	if err := c.WS.Write(context.Background(), websocket.MessageText, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if code, _ := c.CloseStatus(); code != websocket.StatusUnsupportedData {
		t.Fatalf("close %d, want 1003", code)
	}
}

// A binary client that lost messages on a history topic recovers them
// with the subscribe's recover, as bytes, in order.
func TestBinaryHistoryRecovery(t *testing.T) {
	leakcheck.Check(t)
	store := testkit.Must(history.NewMemory(history.Config{}, history.MemoryDeps{}))
	_, url := startServer(t, historyOptions(store, history.Policy{Size: 100, TTL: time.Minute}))
	pub, bin, live := wstest.DialBinary(t, url), wstest.DialBinary(t, url), wstest.Dial(t, url)
	first := resultPos(t, bin.Call("subscribe", `{"topic":"h:1"}`))
	wstest.MustOK(t, live.Call("subscribe", `{"topic":"h:1"}`))
	var sent []string
	for i := range 5 {
		d := string(protocol.AppendBytesJSON(nil, []byte{byte(i), 0xff, byte(i)}))
		sent = append(sent, d)
		resultPos(t, pub.Call("publish", `{"topic":"h:1","data":`+d+`}`))
	}
	if _, data := nextMessages(t, bin, "h:1", 5); strings.Join(data, " ") != strings.Join(sent, " ") {
		t.Fatalf("live binary: %v, want %v", data, sent)
	}
	if _, data := nextMessages(t, live, "h:1", 5); strings.Join(data, " ") != strings.Join(sent, " ") {
		t.Fatalf("live JSON: %v, want %v", data, sent)
	}
	again := wstest.DialBinary(t, url)
	p := resultPos(t, again.Call("subscribe", `{"topic":"h:1","recover":true,"since":{"offset":2,"epoch":"`+first.Epoch+`"}}`))
	if p.Recovered == nil || !*p.Recovered {
		t.Fatalf("not recovered: %+v", p)
	}
	offs, data := nextMessages(t, again, "h:1", 3)
	if offs[0] != 3 || strings.Join(data, " ") != strings.Join(sent[2:], " ") {
		t.Fatalf("recovered %v %v, want offsets 3.. of %v", offs, data, sent)
	}
	h := again.Call("history", `{"topic":"h:1","limit":2}`)
	if !strings.Contains(string(h.Result), sent[4]) {
		t.Fatalf("history: %s", h.Result)
	}
}
