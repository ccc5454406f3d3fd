package protocol

import (
	"errors"
	"strconv"
)

// Error codes of docs/protocol.md ("Error codes"). The -320xx codes are rtserver's own
// and are stable: clients switch on them.
const (
	CodeParseError     = -32700 // the frame is not JSON; the connection stays open
	CodeInvalidRequest = -32600 // JSON, but not a JSON-RPC 2.0 request
	CodeMethodNotFound = -32601 // neither a built-in, a handler nor a proxied method
	CodeInvalidParams  = -32602 // bad topic, missing field
	CodeInternal       = -32603 // a handler panicked or failed unexpectedly
	CodeOverloaded     = -32001 // the message tier shed this call; data: class, reason, retryAfterMs
	CodeRateLimited    = -32002 // a per-class rate limit denied it; data: class, retryAfterMs, limit, remaining
	CodeForbidden      = -32003 // not authenticated or not allowed
	CodeLimitExceeded  = -32004 // e.g. too many subscriptions; data: limit
	CodeUpstream       = -32005 // the RPC backend failed or timed out
)

// Error is a JSON-RPC error object. Data is marshalled as given; a nil Data
// is omitted.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return "jsonrpc error " + strconv.Itoa(e.Code) + ": " + e.Message
}

// NewError returns an error object with the standard message (docs/protocol.md) for
// code when message is empty.
func NewError(code int, message string, data any) *Error {
	if message == "" {
		message = standardMessage(code)
	}
	return &Error{Code: code, Message: message, Data: data}
}

func standardMessage(code int) string {
	switch code {
	case CodeParseError:
		return "parse error"
	case CodeInvalidRequest:
		return "invalid request"
	case CodeMethodNotFound:
		return "method not found"
	case CodeInvalidParams:
		return "invalid params"
	case CodeInternal:
		return "internal error"
	case CodeOverloaded:
		return "OVERLOADED"
	case CodeRateLimited:
		return "RATE_LIMITED"
	case CodeForbidden:
		return "FORBIDDEN"
	case CodeLimitExceeded:
		return "LIMIT_EXCEEDED"
	case CodeUpstream:
		return "UPSTREAM"
	}
	return "error"
}

// OverloadedData is the data of a -32001 error.
type OverloadedData struct {
	Class        string `json:"class"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

// RateLimitedData is the data of a -32002 error.
type RateLimitedData struct {
	Class        string `json:"class"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	// Reason is "COST" when a cost budget (not a call-count rate) denied
	// the call; absent for a rate limit.
	Reason string `json:"reason,omitempty"`
}

// TopicData is the data of a -32003 (or -32005) answer to a subscribe or
// publish that the topic grants refused (docs/access-control.md).
type TopicData struct {
	Topic string `json:"topic"`
}

// LimitData is the data of a -32004 error.
type LimitData struct {
	Limit int `json:"limit"`
}

// AsError converts err to a wire error: an *Error (also wrapped, as
// errors.As finds it) passes through, anything else becomes -32603 without
// leaking its text to the client.
func AsError(err error) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return NewError(CodeInternal, "", nil)
}
