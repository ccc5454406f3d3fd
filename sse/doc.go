// Package sse serves rtserver to clients that cannot open a WebSocket:
// Server-Sent Events down (GET /sse), plain HTTP POST up (POST /sse).
// docs/transports.md is the user's account of it.
//
// Every SSE session, and every POST without one, is a connection of the
// WebSocket server itself, opened in process: the handler makes the
// upgrade request of the client's own (its address, Host, query and
// context, and the headers the server reads of an upgrade: Origin,
// Authorization, X-Forwarded-For; upgradeRequest), hands it to the
// server's /ws handler with a response writer that opens
// an in-memory socket (pipe) for it, and translates between that
// socket's WebSocket frames and the client's HTTP. The server accepts
// the upgrade as it accepts one the door read (wsock.Acceptor): no
// WebSocket library object per session, except on the portable path,
// where the library's Accept hijacks the pipe. So the handshake tier
// (caps, pacing, per-IP rate, origin, token), the topic grants, the
// message tier, history recovery, presence, keepalive and drain are the
// server's own, applied to SSE clients exactly as to WebSocket ones; a
// refusal of the handshake tier reaches the client as the same HTTP
// answer.
//
// Data path: the server writes whole frames to the pipe (Write); each
// text frame becomes one SSE event written to the client's socket, which
// the handler hijacked after the upgrade, in the same Write: there is no
// goroutine of this package per session, and an idle session holds the
// server connection, the pipe, its entry in Handler.sessions and the
// client's socket. The pipe holds what every kind of pipe uses; an event
// stream's topics and positions (events) and a POST's answer (call)
// hang off pointers the other kinds leave nil. Frames for the
// server (the subscribes a session starts with, what POSTs carry, pongs,
// the echo of a close) are masked client frames queued in the pipe for
// the server's read loop.
//
// Idle: the pipe is a wsock.Parkable, so the server's read loop parks on
// it as it parks a WebSocket in its poller, and no goroutine waits for a
// session's input: a frame queued, the end of the input, or the client's
// hang-up resumes it. While parked the pipe also arms the client's socket
// in the server's poller, so a client that leaves ends its session at
// once (the server reads the end of the input), not at the next
// keepalive.
//
// Invariants:
//   - a pipe's server-bound bytes are whole frames, each queued under
//     pipe.rmu: a POST's frame never interleaves with a pong;
//   - a session is in Handler.sessions (under the first half of its id;
//     a POST must name the whole id) from its upgrade until its pipe is
//     closed, and its client socket is closed exactly once, by
//     pipe.Close;
//   - the SSE response head is written to the client socket when the
//     pipe opens (upgrade.open), before the server can write any frame,
//     so every event follows it;
//   - a parked connection's Waker is held under pipe.rmu and taken by
//     the first input or end that follows, which wakes it once (the
//     server's wsock.Parking makes any other wake-up harmless).
package sse
