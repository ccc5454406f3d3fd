package e2e

// The JavaScript client's binary protocol in headless Chromium: the
// browser's own WebSocket, subprotocol negotiation and ArrayBuffer frames.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// A page's client with binary: true publishes a Uint8Array of every byte
// value and gets it back byte for byte, as a Uint8Array, on rt.msgpack;
// a JSON client in the same page gets the same bytes as {"$bin": base64}
// (docs/protocol.md), and the binary client gets the JSON client's data
// as the value it was.
func TestBinaryBrowserClientRoundTrip(t *testing.T) {
	b := needBrowser(t)
	p := start(t, "")
	importClient := jsClientImport(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg := openPage(t, ctx, b, p.url("/healthz"))
	pg.MustEval(t, ctx, `(async () => {
		const m = await `+importClient+`;
		window.binGot = []; window.jsonGot = [];
		window.bin = m.connect("/ws", {binary: true, fallback: false, onError: () => {}});
		window.json = m.connect("/ws", {fallback: false, onError: () => {}});
		await bin.subscribe("room:b", (d) => binGot.push(d)).ready;
		await json.subscribe("room:b", (d) => jsonGot.push(d)).ready;
		window.sent = new Uint8Array(1024).map((_, i) => (i * 7 + (i >> 8)) & 255);
		await bin.publish("room:b", sent);
		await json.publish("room:b", {from: "json", n: [1, 2.5]});
		return true;
	})()`, nil)
	pg.MustEval(t, ctx, until(`binGot.length === 2 && jsonGot.length === 2`), nil)
	var res struct {
		Protocol  string
		Bytes     bool
		Ctor      string
		Value     json.RawMessage
		JSONBytes json.RawMessage
	}
	pg.MustEval(t, ctx, `({
		protocol: bin._ws.protocol,
		bytes: binGot[0] instanceof Uint8Array && binGot[0].length === sent.length && binGot[0].every((x, i) => x === sent[i]),
		ctor: binGot[0].constructor.name,
		value: binGot[1],
		jsonBytes: jsonGot[0],
	})`, &res)
	if res.Protocol != "rt.msgpack" {
		t.Fatalf("the binary client's WebSocket speaks %q, want rt.msgpack", res.Protocol)
	}
	if !res.Bytes {
		t.Fatalf("the binary client got back a %s that differs from the bytes it sent", res.Ctor)
	}
	if string(res.Value) != `{"from":"json","n":[1,2.5]}` {
		t.Fatalf("the binary client got the JSON client's data as %s", res.Value)
	}
	sent := make([]byte, 1024)
	for i := range sent {
		sent[i] = byte((i*7 + i>>8) & 255)
	}
	want, _ := json.Marshal(map[string]string{"$bin": base64.StdEncoding.EncodeToString(sent)})
	if string(res.JSONBytes) != string(want) {
		t.Fatalf("the JSON client got %.80s..., want %.80s...", res.JSONBytes, want)
	}
}
