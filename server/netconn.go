package server

import "github.com/rtserver/rtserver/internal/wsock"

// The socket under a connection is a wsock.Conn: it owns every syscall
// the connection makes after the upgrade. These are the few names of it
// the server uses.

// errSealed reports a write dropped because the connection is closing.
var errSealed = wsock.ErrSealed

// pingFrame is an unmasked ping with no payload.
var pingFrame = wsock.PingFrame

// closeFrame is an unmasked close frame (wsock.CloseFrame).
func closeFrame(code uint16, reason string) []byte { return wsock.CloseFrame(code, reason) }

// appendTextHeader appends a text frame's header (wsock.AppendTextHeader).
// A function, not a variable: a call through a variable makes the
// caller's header array escape to the heap.
func appendTextHeader(b []byte, n int) []byte { return wsock.AppendTextHeader(b, n) }
