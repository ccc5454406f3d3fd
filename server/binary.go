package server

import (
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/protocol"
)

// The binary protocol (docs/protocol.md, "The rt.msgpack subprotocol").
// A connection that chose protocol.BinarySubprotocol sends and receives
// binary frames of MessagePack. Inside, everything stays JSON: a binary
// frame runs as the JSON request it transcodes to (bytes in their JSON
// form, {"$bin":"<base64>"}), so methods, errors, admission, history,
// recovery and presence are the JSON protocol's, and bytes travel the bus
// and the history store in that form. On the way out, every frame queued
// for a binary connection is transcoded (outbound); a message delivered
// to many is transcoded once per message, not once per subscriber
// (messageFrames).

// binaryHead is the first byte of an unfragmented binary frame.
const binaryHead = 0x82

// refusesFrame closes the connection, and reports true, when a message
// of opcode op is not of its protocol. A binary message on a JSON
// connection never gets here: the reader refuses it (readMessage reads
// binary messages only where c.binary, and wsock.ErrBinary closes with
// 1003). A text message on a binary connection is refused here, with
// 1003 too.
func (c *conn) refusesFrame(op wsock.Opcode) bool {
	if !c.binary || op != wsock.OpText {
		return false
	}
	c.refuse(websocket.StatusUnsupportedData, "text frames are not supported under "+protocol.BinarySubprotocol)
	return true
}

// handleMessage runs one message of the client's protocol.
func (c *conn) handleMessage(msg []byte) {
	if c.binary {
		c.handleBinary(msg)
		return
	}
	c.handleFrame(msg)
}

// handleBinary runs one binary frame: as the JSON frame it stands for,
// or answered with the error a JSON frame that does not parse gets.
func (c *conn) handleBinary(frame []byte) {
	bp := transcodeBufs.Get().(*[]byte)
	js, perr := protocol.BinaryToJSON((*bp)[:0], frame, c.s.cfg.MaxJSONDepth)
	if perr != nil {
		c.s.m.ProtocolErrors.WithLabelValues(strconv.Itoa(perr.Code)).Inc()
		c.enqueue(protocol.AppendError(nil, nil, perr))
		if c.countInvalid(1) {
			c.closeInvalid()
		}
	} else {
		c.handleFrame(js)
	}
	if cap(js) <= maxTranscodeBuf {
		*bp = js[:0]
	}
	transcodeBufs.Put(bp)
}

// transcodeBufs hold the JSON of binary frames being run (handleBinary).
var transcodeBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxTranscodeBuf is the largest buffer transcodeBufs keeps.
const maxTranscodeBuf = 256 << 10

// outbound is the frame to queue for c: frame itself on a JSON
// connection, or for a binary frame; the binary frame of a text frame's
// JSON on a binary connection.
func (c *conn) outbound(frame []byte) []byte {
	if !c.binary || len(frame) == 0 || frame[0] != wsock.TextHead {
		return frame
	}
	return binaryFrameOf(frame)
}

// binaryFrameOf transcodes a text frame the server built (valid JSON) to
// a binary frame. A payload that does not transcode (it cannot happen:
// the server writes JSON) becomes an internal error notice, so the
// client still gets a frame it can read.
func binaryFrameOf(text []byte) []byte {
	payload := wsock.TextPayload(text)
	b := frameRoom(len(payload))
	b, ok := protocol.JSONToBinary(b, payload)
	if !ok {
		b, _ = protocol.JSONToBinary(frameRoom(64), protocol.AppendError(nil, nil, protocol.NewError(protocol.CodeInternal, "", nil)))
	}
	return frameBinaryIn(b)
}

// frameBinaryIn is frameIn for a binary frame.
func frameBinaryIn(b []byte) []byte {
	f := frameIn(b)
	f[0] = binaryHead
	return f
}

// messageFrames are the frames of one message, one per encoding, each
// built the first time a subscriber of that encoding needs it: once per
// message, shared by every subscriber of the encoding.
type messageFrames struct {
	topic string
	data  []byte
	text  []byte
	bin   []byte
}

// frameFor is the frame of the message for c. Inlined: a JSON
// subscriber after the first costs a field load and two branches.
func (m *messageFrames) frameFor(c *conn) []byte {
	if !c.binary && m.text != nil {
		return m.text
	}
	return m.build(c)
}

// build is frameFor's first call for an encoding.
func (m *messageFrames) build(c *conn) []byte {
	if c.binary {
		if m.bin == nil {
			m.bin = binaryMessage(m.topic, m.data)
		}
		return m.bin
	}
	if m.text == nil {
		m.text = frameMessage(m.topic, m.data)
	}
	return m.text
}

// binaryMessage is frameMessage for a binary connection.
func binaryMessage(topic string, data []byte) []byte {
	b := frameRoom(len(topic) + len(data) + 32)
	b, ok := protocol.AppendBinaryMessage(b, topic, -1, data)
	if !ok {
		return binaryFrameOf(frameMessage(topic, data))
	}
	return frameBinaryIn(b)
}

// binaryOf gives c the binary form of a shared text frame, built at most
// once into *bin: for fan-outs of frames built elsewhere (history).
func binaryOf(c *conn, text []byte, bin *[]byte) []byte {
	if !c.binary {
		return text
	}
	if *bin == nil {
		*bin = binaryFrameOf(text)
	}
	return *bin
}
