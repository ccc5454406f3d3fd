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
		if d, ok := appendErrorData(append(b, `,"data":`...), e.Data); ok {
			b = d
		} else if d, err := json.Marshal(e.Data); err == nil {
			b = append(b, `,"data":`...)
			b = append(b, d...)
		}
	}
	return append(b, "}}"...)
}

// appendErrorData appends the data of the answers a refusal gives (shed,
// rate limited, forbidden, limit exceeded) without encoding/json, whose
// reflection was a large part of what refusing a publish cost the server;
// the bytes are exactly json.Marshal's. It reports false for any other
// data type, which the caller then marshals.
func appendErrorData(b []byte, data any) ([]byte, bool) {
	switch d := data.(type) {
	case OverloadedData:
		b = append(b, `{"class":`...)
		b = appendMarshalString(b, d.Class)
		b = append(b, `,"reason":`...)
		b = appendMarshalString(b, d.Reason)
		b = append(b, `,"retryAfterMs":`...)
		b = strconv.AppendInt(b, d.RetryAfterMs, 10)
		return append(b, '}'), true
	case RateLimitedData:
		b = append(b, `{"class":`...)
		b = appendMarshalString(b, d.Class)
		b = append(b, `,"retryAfterMs":`...)
		b = strconv.AppendInt(b, d.RetryAfterMs, 10)
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		if d.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendMarshalString(b, d.Reason)
		}
		return append(b, '}'), true
	case TopicData:
		b = append(b, `{"topic":`...)
		b = appendMarshalString(b, d.Topic)
		return append(b, '}'), true
	case LimitData:
		b = append(b, `{"limit":`...)
		b = strconv.AppendInt(b, int64(d.Limit), 10)
		return append(b, '}'), true
	}
	return b, false
}

// appendMarshalString is appendString with json.Marshal's bytes exactly:
// it also leaves the HTML-escaped characters to json.Marshal.
func appendMarshalString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return appendString(b, s)
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
