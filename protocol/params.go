package protocol

import (
	"encoding/json"
	"strconv"

	"github.com/rtserver/rtserver/internal/jsonexact"
)

// The params of the built-in methods that are neither topic calls nor
// history (presence, presenceStats, refresh), read like the others with
// package jsonexact: exact names, other members ignored, a repeated member
// the server reads -32600, a wrong type -32602.

// MaxCursor bounds the cursor of a presence call: a client id.
const MaxCursor = 512

// PresenceParams are the params of presence and presenceStats.
type PresenceParams struct {
	Topic  string
	Cursor string // presence only: "" for the first page
}

var (
	presenceMembers = []string{"topic", "cursor"}
	refreshMembers  = []string{"token"}
)

// DecodePresenceParams decodes and checks the params of presence and
// presenceStats: a topic (checked like any topic) and an optional cursor
// of at most MaxCursor bytes.
func DecodePresenceParams(params json.RawMessage) (PresenceParams, *Error) {
	var p PresenceParams
	var v [2][]byte
	if perr := exactMembers(params, presenceMembers, v[:]); perr != nil {
		return p, perr
	}
	const shape = "params must be an object with a string topic and an optional string cursor"
	var ok bool
	if p.Topic, ok = stringMember(v[0]); !ok {
		return p, NewError(CodeInvalidParams, shape, nil)
	}
	if p.Cursor, ok = stringMember(v[1]); !ok {
		return p, NewError(CodeInvalidParams, shape, nil)
	}
	if msg := CheckTopic(p.Topic); msg != "" {
		return p, NewError(CodeInvalidParams, msg, nil)
	}
	if len(p.Cursor) > MaxCursor {
		return p, NewError(CodeInvalidParams, "cursor too long", nil)
	}
	return p, nil
}

// DecodeRefreshParams decodes the params of refresh: {"token": T}, T a
// non-empty string.
func DecodeRefreshParams(params json.RawMessage) (string, *Error) {
	var v [1][]byte
	if perr := exactMembers(params, refreshMembers, v[:]); perr != nil {
		return "", perr
	}
	tok, ok := stringMember(v[0])
	if !ok || tok == "" {
		return "", NewError(CodeInvalidParams, `params must be {"token": T}`, nil)
	}
	return tok, nil
}

// exactMembers reads names out of params, which must be a valid JSON
// object: -32602 when it is not, -32600 for a repeated member.
func exactMembers(params []byte, names []string, vals [][]byte) *Error {
	if len(params) == 0 || params[0] != '{' {
		return NewError(CodeInvalidParams, "params must be an object", nil)
	}
	if ok, _ := jsonexact.Check(params, 0); !ok {
		return NewError(CodeInvalidParams, "params are not valid JSON", nil)
	}
	dup, _, ok := members(params, names, vals)
	if dup != "" {
		return NewError(CodeInvalidRequest, "duplicate member "+strconv.Quote(dup)+" in params", nil)
	}
	if !ok {
		return NewError(CodeInvalidParams, "params must be an object", nil)
	}
	return nil
}

// stringMember decodes an optional string member: "" when absent, false
// when present and not a string.
func stringMember(v []byte) (string, bool) {
	if v == nil {
		return "", true
	}
	if v[0] != '"' {
		return "", false
	}
	if plainString(v) {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}
