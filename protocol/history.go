package protocol

import (
	"encoding/json"
	"strconv"
)

// History topics (docs/history.md): the params their calls may add, the
// offset in their messages, and the resync event.

// ReasonHistoryUnavailable is the reason of a -32001 answered when the
// history store cannot be reached: retry after the hint.
const ReasonHistoryUnavailable = "HISTORY_UNAVAILABLE"

// EventResync: the server found a gap in a history topic that it could
// not fill for this subscription; subscribe again with since.
const EventResync = "resync"

// Recovery reasons of a subscribe result with recovered false.
const (
	RecoverEpoch   = "epoch"   // the position is of another epoch, or beyond the last offset
	RecoverTrimmed = "trimmed" // messages after the position are gone (size or ttl)
	RecoverTooMany = "tooMany" // more were missed than history.maxReplay
)

// MaxIdempotencyKey is the longest idempotencyKey, in bytes.
const MaxIdempotencyKey = 64

// HistoryLimits of the history method's limit.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// Since is a position a client presents.
type Since struct {
	Offset uint64
	Epoch  string
}

// HistoryParams are the history members of subscribe, publish and history
// params (absent members are zero).
type HistoryParams struct {
	Recover        bool
	Since          *Since
	IdempotencyKey string
	Limit          int // history method; 0 when absent
}

var historyMembers = []string{"recover", "since", "idempotencyKey", "limit"}
var sinceMembers = []string{"offset", "epoch"}

// DecodeHistoryParams reads the history members of params, which
// DecodeTopicParams has already accepted (a valid JSON object). Every
// member is checked exactly: -32602 with a precise message for a wrong
// type or range, -32600 for a repeated member.
func DecodeHistoryParams(params json.RawMessage) (HistoryParams, *Error) {
	var h HistoryParams
	var v [4][]byte
	if dup, _, ok := members(params, historyMembers, v[:]); dup != "" {
		return h, NewError(CodeInvalidRequest, "duplicate member "+strconv.Quote(dup)+" in params", nil)
	} else if !ok {
		return h, NewError(CodeInvalidParams, "params must be an object", nil)
	}
	if r := v[0]; r != nil {
		switch string(r) {
		case "true":
			h.Recover = true
		case "false":
		default:
			return h, NewError(CodeInvalidParams, "recover must be a boolean", nil)
		}
	}
	if s := v[1]; s != nil && string(s) != "null" {
		var sv [2][]byte
		if s[0] != '{' {
			return h, NewError(CodeInvalidParams, "since must be an object", nil)
		}
		if dup, _, _ := members(s, sinceMembers, sv[:]); dup != "" {
			return h, NewError(CodeInvalidRequest, "duplicate member "+strconv.Quote(dup)+" in since", nil)
		}
		off, err := strconv.ParseUint(string(sv[0]), 10, 64)
		if sv[0] == nil || err != nil {
			return h, NewError(CodeInvalidParams, "since.offset must be a non-negative integer", nil)
		}
		epoch, ok := shortString(sv[1], 32)
		if !ok || epoch == "" {
			return h, NewError(CodeInvalidParams, "since.epoch must be a string of 1 to 32 bytes", nil)
		}
		h.Since = &Since{Offset: off, Epoch: epoch}
	}
	if k := v[2]; k != nil {
		key, ok := shortString(k, MaxIdempotencyKey)
		if !ok || key == "" {
			return h, NewError(CodeInvalidParams, "idempotencyKey must be a string of 1 to 64 bytes", nil)
		}
		h.IdempotencyKey = key
	}
	if l := v[3]; l != nil {
		n, err := strconv.Atoi(string(l))
		if err != nil || n < 1 || n > MaxHistoryLimit {
			return h, NewError(CodeInvalidParams, "limit must be an integer from 1 to 1000", nil)
		}
		h.Limit = n
	}
	return h, nil
}

// shortString decodes a JSON string literal of at most max bytes.
func shortString(lit []byte, max int) (string, bool) {
	if len(lit) < 2 || lit[0] != '"' {
		return "", false
	}
	var s string
	if plainString(lit) {
		s = string(lit[1 : len(lit)-1])
	} else if json.Unmarshal(lit, &s) != nil {
		return "", false
	}
	return s, len(s) <= max
}

// MessageAtOverhead is MessageOverhead plus the offset member around its
// number.
const MessageAtOverhead = MessageOverhead + len(`"offset":,`) + 20

// AppendMessageAt appends the "message" notification of a history
// topic's message, with its offset.
func AppendMessageAt(b []byte, topic string, offset uint64, data json.RawMessage) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"message","params":{"topic":`...)
	b = appendString(b, topic)
	b = append(b, `,"offset":`...)
	b = strconv.AppendUint(b, offset, 10)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, "}}"...)
}

// AppendResync appends the system notification {"event":"resync","topic":T}.
func AppendResync(b []byte, topic string) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"system","params":{"event":"resync","topic":`...)
	b = appendString(b, topic)
	return append(b, "}}"...)
}

// AppendPosition appends the result {"epoch":E,"offset":N} (of a publish
// on a history topic, or a subscribe without recover).
func AppendPosition(b []byte, epoch string, offset uint64) []byte {
	b = append(b, `{"epoch":`...)
	b = appendString(b, epoch)
	b = append(b, `,"offset":`...)
	b = strconv.AppendUint(b, offset, 10)
	return append(b, '}')
}

// AppendRecovered appends a subscribe-with-recover result: the position,
// recovered, and the reason when it is false.
func AppendRecovered(b []byte, epoch string, offset uint64, recovered bool, reason string) []byte {
	b = AppendPosition(b, epoch, offset)
	b = b[:len(b)-1]
	if recovered {
		return append(b, `,"recovered":true}`...)
	}
	b = append(b, `,"recovered":false,"reason":`...)
	b = appendString(b, reason)
	return append(b, '}')
}
