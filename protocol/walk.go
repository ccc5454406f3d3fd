package protocol

import "github.com/rtserver/rtserver/internal/jsonexact"

// One decoder, exact by construction: a request object and built-in params
// are read with package jsonexact, the rule every JSON the server reads
// follows. Keys match exactly (case-sensitive, after escapes are
// resolved); unknown members are ignored; a repeated member the server
// reads makes the request invalid (-32600). So no frame can mean one
// method to the admission check and another to a backend. Results alias
// the frame: callers copy what they keep.

// plainString reports whether the JSON string literal s (quotes included)
// means exactly its bytes: no escapes and only ASCII. Anything else is
// decoded by encoding/json (which also replaces invalid UTF-8, so both
// readings agree).
func plainString(s []byte) bool {
	for _, c := range s[1 : len(s)-1] {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// The members the server reads, in the order of members' vals.
var (
	requestMembers = []string{"jsonrpc", "id", "method", "params"}
	topicMembers   = []string{"topic", "data"}
)

func members(data []byte, names []string, vals [][]byte) (dup string, other, ok bool) {
	return jsonexact.Members(data, names, vals)
}
