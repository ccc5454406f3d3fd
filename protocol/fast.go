package protocol

import "encoding/json"

// The fast path decodes the common shapes — a request object whose keys
// are exactly jsonrpc/id/method/params, and built-in params whose keys are
// exactly topic/data — by walking the bytes once json.Valid has vouched
// for them, slicing values out of the frame instead of copying them. Any
// other shape (escaped keys or method, duplicate or unknown keys) falls
// back to encoding/json, so the two paths never disagree (FuzzFastPath
// checks it). Results alias the frame: callers copy what they keep.

// fastRequest decodes a valid JSON object as a request, or reports false.
func fastRequest(data []byte) (Request, bool) {
	var spans [4][]byte // jsonrpc, id, method, params
	if !walkObject(data, func(key, value []byte) bool {
		i := -1
		switch string(key) {
		case "jsonrpc":
			i = 0
		case "id":
			i = 1
		case "method":
			i = 2
		case "params":
			i = 3
		}
		if i < 0 || spans[i] != nil {
			return false
		}
		spans[i] = value
		return true
	}) {
		return Request{}, false
	}
	w := wireRequest{JSONRPC: spans[0], ID: spans[1], Method: spans[2], Params: spans[3]}
	return w.request(), true
}

// fastTopicParams decodes {"topic":T,"data":D} (either order, data
// optional), or reports false.
func fastTopicParams(params []byte) (TopicParams, bool) {
	var topic, data []byte
	if !walkObject(params, func(key, value []byte) bool {
		switch string(key) {
		case "topic":
			if topic != nil {
				return false
			}
			topic = value
		case "data":
			if data != nil {
				return false
			}
			data = value
		default:
			return false
		}
		return true
	}) {
		return TopicParams{}, false
	}
	if len(topic) < 2 || topic[0] != '"' || !plainString(topic) {
		return TopicParams{}, false
	}
	return TopicParams{Topic: string(topic[1 : len(topic)-1]), Data: json.RawMessage(data)}, true
}

// plainString reports whether the JSON string literal s (quotes included)
// means exactly its bytes: no escapes and only ASCII (encoding/json would
// replace invalid UTF-8, so anything else takes the slow path).
func plainString(s []byte) bool {
	for _, c := range s[1 : len(s)-1] {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// walkObject calls f for each member of the JSON object in data, which
// must be valid JSON (callers run json.Valid first). It reports false when
// data is not an object, a key has escapes, or f says stop.
func walkObject(data []byte, f func(key, value []byte) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) {
		if data[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(data) && data[end] != '"' {
			if data[end] == '\\' {
				return false
			}
			end++
		}
		key := data[i+1 : end]
		i = skipSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i)
		if vend <= i || !f(key, data[i:vend]) {
			return false
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value starting at i.
func skipValue(d []byte, i int) int {
	if i >= len(d) {
		return i
	}
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				i = skipString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(d) {
			switch d[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index after the string starting at d[i] == '"'.
func skipString(d []byte, i int) int {
	i++
	for i < len(d) {
		switch d[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i + 1
		}
		i++
	}
	return i
}
