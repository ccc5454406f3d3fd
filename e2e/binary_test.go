package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// binaryPayload is bytes no JSON string could carry as they are: every
// byte value, a NUL, invalid UTF-8.
func binaryPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// Bytes round trip through the binary between Go clients of both
// encodings: a binary client's bytes reach binary subscribers as the same
// bytes and JSON subscribers in their JSON form; a JSON client's data
// reaches binary subscribers as the same value.
func TestBinaryRoundTripAcrossEncodings(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bin, binGot := dialSubscribed(t, ctx, p.WS(), &client.Options{Binary: true}, "doc:1")
	defer bin.Close()
	js, jsGot := dialSubscribed(t, ctx, p.WS(), &client.Options{}, "doc:1")
	defer js.Close()

	payload := binaryPayload(1024)
	if err := bin.Publish(ctx, "doc:1", client.Bytes(payload)); err != nil {
		t.Fatal(err)
	}
	if got, ok := client.BytesOf(json.RawMessage(recv(t, ctx, binGot))); !ok || !bytes.Equal(got, payload) {
		t.Fatalf("binary subscriber got %d bytes (%v), want the %d published", len(got), ok, len(payload))
	}
	jsData := recv(t, ctx, jsGot)
	if !strings.HasPrefix(jsData, `{"$bin":"`) {
		t.Fatalf("JSON subscriber got %.40s..., want the JSON form of bytes", jsData)
	}
	if got, ok := client.BytesOf(json.RawMessage(jsData)); !ok || !bytes.Equal(got, payload) {
		t.Fatal("JSON subscriber's form does not hold the bytes")
	}

	if err := js.Publish(ctx, "doc:1", json.RawMessage(`{"text":"hi","n":[1,-2,3.5],"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan string{"binary": binGot, "JSON": jsGot} {
		var v struct {
			Text string
			N    []float64
			OK   bool
		}
		if d := recv(t, ctx, ch); json.Unmarshal([]byte(d), &v) != nil || v.Text != "hi" || len(v.N) != 3 || v.N[2] != 3.5 || !v.OK {
			t.Fatalf("%s subscriber got %s", name, d)
		}
	}
}

func recv(t *testing.T, ctx context.Context, ch <-chan string) string {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-ctx.Done():
		t.Fatal("no message")
		return ""
	}
}

// A binary client that subscribes from a position of a history topic
// gets what it missed, as bytes, in order, then live messages.
func TestBinaryHistoryRecoveryThroughTheBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, historyConfig(100, "1m", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := client.Dial(ctx, p.WS(), &client.Options{Binary: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var first client.Position
	for i := range 4 {
		pos, err := pub.PublishAt(ctx, "room:b", client.Bytes{byte(i), 0xff, 0})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = pos
		}
	}
	sub, err := client.Dial(ctx, p.WS(), &client.Options{Binary: true, OnRecovery: func(_ string, recovered bool, reason string) {
		if !recovered {
			t.Errorf("not recovered: %s", reason)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan client.Message, 8)
	if _, err := sub.SubscribeSince(ctx, "room:b", first, func(m client.Message) { got <- m }); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishAt(ctx, "room:b", client.Bytes{4, 0xff, 0}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		select {
		case m := <-got:
			b, ok := client.BytesOf(m.Data)
			if !ok || m.Offset != first.Offset+uint64(i) || !bytes.Equal(b, []byte{byte(i), 0xff, 0}) {
				t.Fatalf("message %d: offset %d, %v (%s)", i, m.Offset, b, m.Data)
			}
		case <-ctx.Done():
			t.Fatalf("message %d never came", i)
		}
	}
}

// rtserver pub --file publishes a file's bytes; rtserver sub --raw
// writes them to stdout exactly as published.
func TestCLIPublishesAndSubscribesRawBytes(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "")
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin")}
	want := append(binaryPayload(3000), []byte("second\x00\xff")...)
	if err := os.WriteFile(files[0], want[:3000], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[1], want[3000:], 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, binary, "sub", "--url", p.WS(), "--raw", "--count", "2", "blob:1")
	sub.Env = binaryEnv()
	var out bytes.Buffer
	errOut := &testkit.LogBuffer{}
	sub.Stdout, sub.Stderr = &out, errOut
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "sub subscribed", func() bool {
		return strings.Contains(errOut.String(), "subscribed to blob:1")
	})
	for _, f := range files {
		pub := exec.CommandContext(ctx, binary, "pub", "--url", p.WS(), "--file", f, "blob:1")
		pub.Env = binaryEnv()
		if b, err := pub.CombinedOutput(); err != nil {
			t.Fatalf("pub --file: %v: %s", err, b)
		}
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("sub --raw: %v: %s", err, errOut.String())
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("sub --raw wrote %d bytes, want the %d published", out.Len(), len(want))
	}
}

// The JavaScript client on the binary protocol, in Node.js against the
// binary: a Uint8Array it publishes reaches it back as a Uint8Array of
// the same bytes, and JSON data published by a JSON client as the value.
func TestJSClientBinaryRoundTripInNode(t *testing.T) {
	leakcheck.Check(t)
	node := testkit.Program(t, "node", "apt-get install nodejs")
	p := start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mod, err := filepath.Abs("../clients/js/rtclient.js")
	if err != nil {
		t.Fatal(err)
	}
	script := `
const { connect } = await import(process.argv[1]);
const url = process.argv[2];
const bin = connect(url, { binary: true, fallback: false, onError: () => {} });
const got = [];
const off = bin.subscribe("js:1", (d) => got.push(d));
await off.ready;
const sent = new Uint8Array(1024).map((_, i) => (i * 7 + (i >> 8)) & 255);
await bin.publish("js:1", sent);
await bin.publish("js:1", { text: "hi", n: [1, 2.5] });
const json = connect(url, { fallback: false, onError: () => {} });
await json.publish("js:1", { from: "json" });
const t0 = Date.now();
while (got.length < 3 && Date.now() - t0 < 20000) await new Promise((r) => setTimeout(r, 5));
bin.close(); json.close();
const b = got[0];
console.log(JSON.stringify({
  bytes: b instanceof Uint8Array && b.length === sent.length && b.every((x, i) => x === sent[i]),
  value: got[1], json: got[2],
}));
`
	cmd := exec.CommandContext(ctx, node, "--experimental-websocket", "--no-warnings", "--input-type=module", "-e", script, mod, p.WS())
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "WebSocket is not defined") {
			t.Skipf("this Node.js has no WebSocket: %s", out)
		}
		t.Fatalf("node: %v: %s", err, out)
	}
	var res struct {
		Bytes bool
		Value struct {
			Text string
			N    []float64
		}
		JSON struct{ From string }
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		t.Fatalf("node printed %s: %v", out, err)
	}
	if !res.Bytes || res.Value.Text != "hi" || len(res.Value.N) != 2 || res.JSON.From != "json" {
		t.Fatalf("node got %s", out)
	}
}
