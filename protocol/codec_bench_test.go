package protocol

import "testing"

var typical = []byte(`{"jsonrpc":"2.0","id":42,"method":"publish","params":{"topic":"chat:room-17","data":{"user":"u123","text":"hello there, how is it going?"}}}`)

func BenchmarkDecodeTypical(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typical)))
	for b.Loop() {
		f, _ := Decode(typical)
		if _, err := DecodeTopicParams(f.Requests[0].Params, true); err != nil {
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
