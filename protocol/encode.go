package protocol

import (
	"encoding/json"
	"strconv"
)

var nullID = json.RawMessage("null")

// AppendResult appends a success response. A nil result is sent as {}.
func AppendResult(b []byte, id, result json.RawMessage) []byte {
	if id == nil {
		id = nullID
	}
	if result == nil {
		result = json.RawMessage("{}")
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// AppendError appends an error response. id nil is sent as null.
func AppendError(b []byte, id json.RawMessage, e *Error) []byte {
	if id == nil {
		id = nullID
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"message":`...)
	b = appendString(b, e.Message)
	if e.Data != nil {
		if d, err := json.Marshal(e.Data); err == nil {
			b = append(b, `,"data":`...)
			b = append(b, d...)
		}
	}
	return append(b, "}}"...)
}

// MessageOverhead is the size of a "message" notification around its topic
// and data (when the topic needs no escaping): size buffers with it.
const MessageOverhead = len(`{"jsonrpc":"2.0","method":"message","params":{"topic":"","data":}}`)

// AppendMessage appends a "message" notification for a topic. data must be
// valid JSON (it is the value a publisher sent, already validated).
func AppendMessage(b []byte, topic string, data json.RawMessage) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"message","params":{"topic":`...)
	b = appendString(b, topic)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, "}}"...)
}

// MethodPresence names the presence diff notification, which carries a
// topic's coalesced joins and leaves (docs/presence.md).
const MethodPresence = "presence"

// SystemEvent names of the "system" notification.
const (
	EventDegraded  = "degraded"
	EventRecovered = "recovered"
	EventDraining  = "draining"
	// EventTokenExpiring: the connection's token expires in expiresInMs;
	// call refresh before then (docs/protocol.md).
	EventTokenExpiring = "tokenExpiring"
	// EventUnsubscribed: the server API took the connection off a topic;
	// its params carry the topic.
	EventUnsubscribed = "unsubscribed"
	// EventGap: messages published on another instance to the topic in
	// its params were lost on the way to this one (it fell behind).
	EventGap = "gap"
)

// AppendTokenExpiring appends the system tokenExpiring notification.
func AppendTokenExpiring(b []byte, expiresInMs int64) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"system","params":{"event":"tokenExpiring","expiresInMs":`...)
	b = strconv.AppendInt(b, expiresInMs, 10)
	return append(b, "}}"...)
}

// AppendUnsubscribed appends the system notification
// {"event":"unsubscribed","topic":T}.
func AppendUnsubscribed(b []byte, topic string) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"system","params":{"event":"unsubscribed","topic":`...)
	b = appendString(b, topic)
	return append(b, "}}"...)
}

// AppendGap appends the system notification {"event":"gap","topic":T}.
func AppendGap(b []byte, topic string) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"system","params":{"event":"gap","topic":`...)
	b = appendString(b, topic)
	return append(b, "}}"...)
}

// AppendSystem appends a "system" notification. reconnectAfterMs is
// included when positive (the draining event).
func AppendSystem(b []byte, event string, reconnectAfterMs int64) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"system","params":{"event":`...)
	b = appendString(b, event)
	if reconnectAfterMs > 0 {
		b = append(b, `,"reconnectAfterMs":`...)
		b = strconv.AppendInt(b, reconnectAfterMs, 10)
	}
	return append(b, "}}"...)
}

// appendString appends s as a JSON string. Topics and our own messages are
// plain ASCII, so the fast path copies; anything else goes through
// encoding/json for correct escaping.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
