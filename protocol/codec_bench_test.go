package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

var typical = []byte(`{"jsonrpc":"2.0","id":42,"method":"publish","params":{"topic":"chat:room-17","data":{"user":"u123","text":"hello there, how is it going?"}}}`)

func BenchmarkDecodeTypical(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typical)))
	for b.Loop() {
		f, _ := Decode(typical)
		if _, err := f.Requests[0].TopicParams(true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendMessage(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	data := []byte(`{"user":"u123","text":"hello there, how is it going?"}`)
	for b.Loop() {
		buf = AppendMessage(buf[:0], "chat:room-17", data)
	}
}

// The server checks each text frame is UTF-8 (close 1007) before decoding
// it: its cost next to BenchmarkDecodeTypical, on the typical frame and on
// a 64 KiB one (the default limits.maxMessageBytes) of mostly non-ASCII.
func BenchmarkValidUTF8(b *testing.B) {
	big := []byte(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"t","data":"` + strings.Repeat("héllo wörld ", 65536/14) + `"}}`)
	for _, bc := range []struct {
		name  string
		frame []byte
	}{{"typical", typical}, {"64KiB", big}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.frame)))
			for b.Loop() {
				if !utf8.Valid(bc.frame) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
