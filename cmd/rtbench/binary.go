package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"sync/atomic"

	"github.com/rtserver/rtserver/protocol"
)

// Message data as bytes (fanout --data): "bytes" publishes and receives
// them on the binary protocol (rt.msgpack) as raw bytes; "base64" sends
// the same bytes on the JSON protocol in their JSON form,
// {"$bin":"<base64>"}, which is what a JSON client pays for them. The
// bytes are the JSON payload's text, so a subscriber finds the send time
// in them as in a JSON message (after decoding the base64).

const (
	dataJSON   = "json"
	dataBytes  = "bytes"
	dataBase64 = "base64"
)

// binaryMode: every frame rtbench writes and reads is of the binary
// protocol (set once, before any connection).
var binaryMode atomic.Bool

// base64Mode: message data is the JSON form of bytes.
var base64Mode atomic.Bool

func checkData(mode string) error {
	switch mode {
	case dataJSON, dataBytes, dataBase64:
		return nil
	}
	return fmt.Errorf("--data %q: want json, bytes or base64", mode)
}

// setDataMode sets the modes for --data.
func setDataMode(mode string) {
	binaryMode.Store(mode == dataBytes)
	base64Mode.Store(mode == dataBase64)
}

// dataOf is the data a publish carries for payload p.
func dataOf(p []byte) []byte {
	if binaryMode.Load() || base64Mode.Load() {
		return protocol.AppendBytesJSON(nil, p)
	}
	return p
}

// toWire is the frame written for a JSON request.
func toWire(b []byte) []byte {
	if !binaryMode.Load() {
		return b
	}
	out, ok := protocol.JSONToBinary(nil, b)
	if !ok {
		panic("rtbench: a request that is not JSON")
	}
	return out
}

// fromWire is the JSON of a frame read.
func fromWire(b []byte) []byte {
	if !binaryMode.Load() {
		return b
	}
	js, perr := protocol.BinaryToJSON(nil, b, 0)
	if perr != nil {
		return nil
	}
	return js
}

var binKey = []byte(`"$bin":"`)

// scanDelivery is scanTimestamps for a subscriber's frame: in base64 mode
// each message's bytes are decoded first.
func scanDelivery(b []byte, f func(ts int64)) int {
	if !base64Mode.Load() {
		return scanTimestamps(b, f)
	}
	n := 0
	var buf []byte
	for {
		i := bytes.Index(b, binKey)
		if i < 0 {
			return n
		}
		b = b[i+len(binKey):]
		j := bytes.IndexByte(b, '"')
		if j < 0 {
			return n
		}
		var err error
		if buf, err = base64.StdEncoding.AppendDecode(buf[:0], b[:j]); err == nil {
			n += scanTimestamps(buf, f)
		}
		b = b[j:]
	}
}

// wireBytes is the size of a server frame of n payload bytes on the wire:
// with its header (unmasked, as the server sends).
func wireBytes(n int) int {
	switch {
	case n < 126:
		return n + 2
	case n <= 0xFFFF:
		return n + 4
	}
	return n + 10
}
