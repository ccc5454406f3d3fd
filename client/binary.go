package client

import (
	"encoding/json"
	"errors"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/protocol"
)

// The binary protocol (Options.Binary, docs/protocol.md): the client
// builds and reads JSON as always, and transcodes at the socket, so every
// method behaves as on the JSON protocol; Bytes are raw bytes on the wire.

// Bytes is message data that is bytes: publish it (Publish, PublishAt)
// and subscribers on the binary protocol receive exactly these bytes, and
// JSON subscribers their JSON form, {"$bin":"<base64>"} (BytesOf).
type Bytes []byte

// MarshalJSON writes the JSON form of b.
func (b Bytes) MarshalJSON() ([]byte, error) { return protocol.AppendBytesJSON(nil, b), nil }

// BytesOf returns the bytes a message's data holds, when it holds bytes
// (published as Bytes, or by any client as raw bytes), and reports
// whether it did.
func BytesOf(data json.RawMessage) ([]byte, bool) { return protocol.BytesOf(data) }

// errNotBinary: Options.Binary, and the server did not choose the binary
// protocol (a server that predates it).
var errNotBinary = errors.New("rtclient: the server does not speak " + protocol.BinarySubprotocol)

// maxServerDepth is how deep a binary frame from the server may nest.
const maxServerDepth = 1024

// inbound is the JSON of a frame read from the server.
func (cn *conn) inbound(typ websocket.MessageType, b []byte) ([]byte, error) {
	if !cn.binary {
		if typ != websocket.MessageText {
			return nil, errors.New("a binary frame on a JSON connection")
		}
		return b, nil
	}
	if typ != websocket.MessageBinary {
		return nil, errors.New("a text frame on a binary connection")
	}
	js, perr := protocol.BinaryToJSON(nil, b, maxServerDepth)
	if perr != nil {
		return nil, perr
	}
	return js, nil
}

// outbound is the frame to write for a JSON request.
func (cn *conn) outbound(b []byte) (websocket.MessageType, []byte, error) {
	if !cn.binary {
		return websocket.MessageText, b, nil
	}
	bin, ok := protocol.JSONToBinary(nil, b)
	if !ok {
		return 0, nil, errors.New("rtclient: request is not JSON")
	}
	return websocket.MessageBinary, bin, nil
}
