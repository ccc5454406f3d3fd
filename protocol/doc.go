// Package protocol is the JSON-RPC 2.0 codec of rtserver's wire protocol
// (docs/protocol.md).
//
// It owns: decoding one text frame into requests (a single request or a
// batch array), the error codes of docs/protocol.md, appending responses and
// server notifications to a byte slice, and the topic grammar.
//
// It must never panic on untrusted bytes: Decode answers every malformed
// input with a *Error that the caller sends back (-32700 for bytes that are
// not JSON, -32600 for JSON that is not a request). FuzzDecode proves it.
//
// Encoding is append-style (AppendResult, AppendError, AppendMessage) so
// the server can build a frame once and share it between subscribers, and
// reuse buffers without allocating per message.
package protocol
