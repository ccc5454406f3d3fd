package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/rtserver/rtserver/internal/jsonexact"
)

// Request is one decoded JSON-RPC request or notification.
type Request struct {
	// ID is the raw id exactly as the client sent it (a number, a string or
	// null). It is nil for a notification, which gets no response.
	ID     json.RawMessage
	Method string
	// Params is the raw params value (an object or an array), or nil.
	Params json.RawMessage
	// Err is set when this element of the frame is not a valid request. The
	// caller answers it with Err (using ID, which may be nil: then null).
	Err *Error
	// Plain is true when the request object had no members but jsonrpc,
	// id, method and params, each once at most (keys compared after
	// unescaping). Its bytes then mean the same request to every JSON
	// decoder, case-insensitive ones included, and may be forwarded as
	// they are; any other object must be re-encoded from the decoded
	// members, or a backend could run another method than the one admitted.
	Plain bool
	// validParams is true when Params was sliced out of a frame Decode
	// checked: TopicParams need not check it again.
	validParams bool
}

// IsNotification reports whether the request carries no id.
func (r *Request) IsNotification() bool { return r.ID == nil && r.Err == nil }

// Frame is the result of decoding one text frame.
type Frame struct {
	Requests []Request
	// Batch is true when the frame was a JSON array: responses then go back
	// as one array (docs/protocol.md, JSON-RPC 2.0 section 6).
	Batch bool
}

// MaxBatch bounds the number of requests in one batch frame. The frame size
// is already bounded by the read limit; this bounds the work one frame asks
// for, and the answer: a larger batch is refused as a whole with one
// -32600, and none of its requests runs.
const MaxBatch = 100

// DefaultMaxDepth is how deeply a frame's JSON may nest when no other
// limit is given (limits.maxJSONDepth): well within what common JSON
// parsers of RPC backends take (Python's stops near 1,000).
const DefaultMaxDepth = 64

// Decode parses one frame with DefaultMaxDepth; see DecodeDepth.
func Decode(frame []byte) (Frame, *Error) { return DecodeDepth(frame, DefaultMaxDepth) }

// DecodeDepth parses one frame whose JSON may nest at most maxDepth levels
// (0 or less: DefaultMaxDepth). The raw members of the requests (ID,
// Params) may alias frame: copy what outlives it. It returns a non-nil
// *Error only when the frame as a whole must be answered with a single
// error (parse error, nesting too deep, an empty batch, a batch of more
// than MaxBatch requests); otherwise per-element problems are in
// Request.Err.
func DecodeDepth(frame []byte, maxDepth int) (Frame, *Error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	// The one pass over the whole frame: what json.Valid accepts, and how
	// deep it nests. Everything after it only slices the valid bytes.
	data := bytes.TrimLeft(frame, " \t\r\n")
	valid, deep := jsonexact.Check(data, maxDepth)
	if len(data) == 0 || !valid {
		return Frame{}, NewError(CodeParseError, "", nil)
	}
	if deep {
		return Frame{}, tooDeep(maxDepth)
	}
	switch data[0] {
	case '{':
		return Frame{Requests: []Request{decodeRequest(data)}}, nil
	case '[':
	default:
		return Frame{Requests: []Request{invalid(nil, "request must be an object")}}, nil
	}
	n := 0
	jsonexact.WalkArray(data, func([]byte) bool { n++; return n <= MaxBatch })
	switch {
	case n == 0:
		return Frame{}, NewError(CodeInvalidRequest, "empty batch", nil)
	case n > MaxBatch:
		return Frame{}, batchTooLarge
	}
	reqs := make([]Request, 0, n)
	jsonexact.WalkArray(data, func(e []byte) bool {
		if e[0] != '{' {
			reqs = append(reqs, invalid(nil, "request must be an object"))
		} else {
			reqs = append(reqs, decodeRequest(e))
		}
		return true
	})
	return Frame{Requests: reqs, Batch: true}, nil
}

var batchTooLarge = NewError(CodeInvalidRequest, "batch too large: at most "+strconv.Itoa(MaxBatch)+" requests", nil)

func tooDeep(maxDepth int) *Error {
	return NewError(CodeInvalidRequest, "JSON nested deeper than "+strconv.Itoa(maxDepth)+" levels", nil)
}

// decodeRequest decodes one request object (valid JSON, starting with
// '{') with exact keys (see walk.go).
func decodeRequest(data []byte) Request {
	var v [4][]byte
	dup, other, ok := members(data, requestMembers, v[:])
	w := wireRequest{JSONRPC: v[0], ID: v[1], Method: v[2], Params: v[3]}
	if dup != "" {
		id := w.ID
		if id != nil && (dup == "id" || !validID(id)) {
			id = nil
		}
		return invalid(id, "duplicate member "+strconv.Quote(dup))
	}
	if !ok {
		return invalid(nil, "request must be an object")
	}
	r := w.request()
	r.Plain = !other && r.Err == nil
	r.validParams = r.Params != nil
	return r
}

// wireRequest mirrors the request object. RawMessage fields keep an absent
// member (nil) apart from an explicit null ("null").
type wireRequest struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
}

var version = []byte(`"2.0"`)

// request validates the decoded members.
func (w *wireRequest) request() Request {
	id := w.ID
	if id != nil && !validID(id) {
		return invalid(nil, "id must be a string, a number or null")
	}
	if !bytes.Equal(w.JSONRPC, version) {
		return invalid(id, `jsonrpc must be "2.0"`)
	}
	var method string
	switch m := w.Method; {
	case len(m) >= 2 && m[0] == '"' && plainString(m):
		method = methodName(m[1 : len(m)-1]) // no escapes: the bytes are the string
	case len(m) == 0 || m[0] != '"':
		return invalid(id, "method must be a non-empty string")
	default:
		// Unmarshal's target escapes to the heap: declared here, only a
		// method with escapes pays for it.
		var s string
		if json.Unmarshal(m, &s) != nil {
			return invalid(id, "method must be a non-empty string")
		}
		method = s
	}
	if method == "" {
		return invalid(id, "method must be a non-empty string")
	}
	if w.Params != nil {
		if c := w.Params[0]; c != '{' && c != '[' {
			return invalid(id, "params must be an object or an array")
		}
	}
	return Request{ID: id, Method: method, Params: w.Params}
}

func invalid(id json.RawMessage, msg string) Request {
	if id == nil {
		id = json.RawMessage("null")
	}
	return Request{ID: id, Err: NewError(CodeInvalidRequest, msg, nil)}
}

func validID(id json.RawMessage) bool {
	switch c := id[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	case bytes.Equal(id, []byte("null")):
		return true
	}
	return false
}

// TopicParams are the params of subscribe, unsubscribe and publish.
type TopicParams struct {
	Topic string          `json:"topic"`
	Data  json.RawMessage `json:"data"`
}

// DecodeTopicParams decodes built-in params and validates the topic. It
// returns -32602 with a precise message on any problem. withData requires
// the data member (publish).
func DecodeTopicParams(params json.RawMessage, withData bool) (TopicParams, *Error) {
	return decodeTopicParamsOf(params, withData, false)
}

// TopicParams is DecodeTopicParams of r.Params, without checking again
// what Decode has checked.
func (r *Request) TopicParams(withData bool) (TopicParams, *Error) {
	return decodeTopicParamsOf(r.Params, withData, r.validParams)
}

func decodeTopicParamsOf(params json.RawMessage, withData, valid bool) (TopicParams, *Error) {
	var p TopicParams
	if len(params) == 0 || params[0] != '{' {
		return p, NewError(CodeInvalidParams, "params must be an object", nil)
	}
	if !valid {
		if ok, _ := jsonexact.Check(params, 0); !ok {
			return p, NewError(CodeInvalidParams, "params are not valid JSON", nil)
		}
	}
	if perr := decodeTopicParams(params, &p); perr != nil {
		return p, perr
	}
	if err := CheckTopic(p.Topic); err != "" {
		return p, NewError(CodeInvalidParams, err, nil)
	}
	if withData && p.Data == nil {
		return p, NewError(CodeInvalidParams, "missing data", nil)
	}
	return p, nil
}

// decodeTopicParams decodes topic and data with exact keys, like
// decodeRequest: other members are ignored, a repeated topic or data is
// -32600, and a topic that is not a string is -32602.
func decodeTopicParams(params []byte, p *TopicParams) *Error {
	var v [2][]byte
	dup, _, _ := members(params, topicMembers, v[:])
	topic := v[0]
	p.Data = v[1]
	if dup != "" {
		return NewError(CodeInvalidRequest, "duplicate member "+strconv.Quote(dup)+" in params", nil)
	}
	if topic != nil {
		if topic[0] != '"' {
			return NewError(CodeInvalidParams, "topic must be a string", nil)
		}
		if plainString(topic) {
			p.Topic = string(topic[1 : len(topic)-1])
		} else {
			// Not &p.Topic: that would move the caller's p to the heap on
			// every call (see request).
			var s string
			if json.Unmarshal(topic, &s) != nil {
				return NewError(CodeInvalidParams, "topic must be a string", nil)
			}
			p.Topic = s
		}
	}
	return nil
}

// methodName returns the method as a string, without allocating for the
// built-ins that make up most traffic.
func methodName(b []byte) string {
	switch string(b) { // compiled to comparisons, no conversion
	case "publish":
		return "publish"
	case "subscribe":
		return "subscribe"
	case "unsubscribe":
		return "unsubscribe"
	}
	return string(b)
}
