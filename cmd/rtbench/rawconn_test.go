package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/rtserver/rtserver/protocol"
)

// parseFrame takes a whole unmasked frame of any length encoding, asks
// for more while one is cut short, and refuses what a server never sends.
func TestParseFrame(t *testing.T) {
	for _, size := range []int{0, 1, 125, 126, 0xFFFF, 0x10000} {
		p := bytes.Repeat([]byte{'x'}, size)
		var f []byte
		switch {
		case size < 126:
			f = append([]byte{0x81, byte(size)}, p...)
		case size <= 0xFFFF:
			f = append([]byte{0x81, 126, byte(size >> 8), byte(size)}, p...)
		default:
			f = append([]byte{0x81, 127, 0, 0, 0, 0, 0, byte(size >> 16), byte(size >> 8), byte(size)}, p...)
		}
		for cut := range len(f) {
			if _, _, n, err := parseFrame(f[:cut]); n != 0 || err != nil {
				t.Fatalf("size %d cut at %d: n %d err %v, want more input", size, cut, n, err)
			}
		}
		op, got, n, err := parseFrame(append(f, 0x89, 0)) // the next frame follows
		if err != nil || op != 1 || n != len(f) || !bytes.Equal(got, p) {
			t.Fatalf("size %d: op %d n %d err %v payload %d bytes", size, op, n, err, len(got))
		}
	}
	for _, bad := range [][]byte{{0x01, 0}, {0x81, 0x80 | 1, 0, 0, 0, 0, 'x'}, {0x81, 127, 0, 0, 0, 0, 0x10, 0, 0, 0}} {
		if _, _, _, err := parseFrame(bad); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

// Raw clients and the library's count the same deliveries: every one
// owed, each with its latency.
func TestFanoutRawAndLibrarySubscribersAgree(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{false, true} {
		u, _ := startNode(t, nil)
		res, err := runFanout(testCtx(t), fanoutConfig{URL: u, P: 2, S: 6, T: 3, Size: 64, Duration: 200 * time.Millisecond, Rate: 200, OwnTopics: true, Raw: raw, ServerPID: os.Getpid()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Published == 0 || res.PublishErrors != nil || res.SubsClosed != nil {
			t.Fatalf("raw %v: published %d errors %v closed %v", raw, res.Published, res.PublishErrors, res.SubsClosed)
		}
		if res.Delivered != 2*res.Published || res.Latency.N != uint64(res.Delivered) {
			t.Errorf("raw %v: published %d delivered %d latencies %d, want 2 deliveries each", raw, res.Published, res.Delivered, res.Latency.N)
		}
		if want := res.Delivered * int64(wireBytes(0)); res.WireBytes <= want {
			t.Errorf("raw %v: %d wire bytes for %d deliveries", raw, res.WireBytes, res.Delivered)
		}
	}
}

// scanAnswer reads rtserver's answers as a JSON decode does, and leaves
// anything else to one.
func TestScanAnswer(t *testing.T) {
	for _, b := range [][]byte{
		protocol.AppendResult(nil, []byte("7"), nil),
		protocol.AppendResult(nil, []byte("18446744073709551615"), []byte(`{"offset":3}`)),
		protocol.AppendError(nil, []byte("12"), protocol.NewError(protocol.CodeOverloaded, "shed", protocol.OverloadedData{Class: "pub", RetryAfterMs: 5})),
		protocol.AppendError(nil, []byte("0"), protocol.NewError(protocol.CodeInvalidParams, "bad", nil)),
	} {
		id, code, failed, ok := scanAnswer(b)
		fs, err := frames(b)
		if !ok || err != nil || len(fs) != 1 {
			t.Fatalf("%s: ok %v, decode %v", b, ok, err)
		}
		f := fs[0]
		if id != *f.ID || failed != (f.Error != nil) || (failed && code != f.Error.Code) {
			t.Errorf("%s: id %d code %d failed %v, decoded %+v", b, id, code, failed, f)
		}
	}
	for _, b := range []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`, `{"id":1,"result":{}}`, `{"jsonrpc":"2.0","id":"a","result":{}}`, `[{"jsonrpc":"2.0","id":1,"result":{}}]`} {
		if _, _, _, ok := scanAnswer([]byte(b)); ok {
			t.Errorf("%s: scanned", b)
		}
	}
}
