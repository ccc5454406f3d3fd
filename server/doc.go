// Package server runs rtserver's WebSocket connections: the read loop, the
// JSON-RPC dispatch with its admission step, the local hub of topic
// subscriptions, per-connection send queues bounded in bytes, and drain.
//
// Data path: ServeHTTP asks the handshake.Gate and accepts the upgrade:
// one the door read (handshake.ServingListener), or one made in process
// on an event stream's in-memory socket, is answered by internal/wsock
// alone (wsock.Acceptor: no WebSocket library object for the
// connection), anything else by the library's Accept. Where the
// socket can park, the goroutine that served the upgrade goes on as the
// connection's read goroutine; elsewhere a read goroutine is started and
// the HTTP handler returns. When it has read all the input there is, the
// read goroutine parks the
// connection in the server's readiness poller (wsock.Poller) and ends: an
// idle connection has no goroutine. Input, or the close of its socket from
// anywhere (rawConn.Close), starts the next one (conn.Wake), unless what
// came is the client's close frame alone on a connection with nothing to
// undo: the waker (the poller's goroutine) then answers it and ends the
// connection itself, starting no goroutine; an in-memory
// socket (an event stream's, wsock.Parkable) parks the same way, waking
// its connection itself when it has input. Where there is no poller
// (other systems, wsock.Portable) the goroutine waits on the socket
// instead, a few frames deep. Each frame is decoded by
// package protocol; every call is classified by the message.Router and
// checked by its message.Class before it runs. Built-ins (subscribe,
// unsubscribe, publish) run inline on the read goroutine, which keeps one
// publisher's messages to one topic in order; application RPCs run in a
// goroutine per call, bounded per connection.
//
// Outbound frames go to a per-connection queue bounded in bytes
// (Config.SendQueueBytes). A writer goroutine exists only while the queue is
// non-empty. A connection whose backlog passes the bound, or whose socket
// takes nothing for the write timeout, is closed with 1013 and counted;
// nobody else waits for it. A published message is encoded once and the same
// bytes are queued to every subscriber. The bytes on the socket itself (frame
// headers, close and ping frames written beneath the WebSocket library, the
// calls that do not wait) are package internal/wsock's; netconn.go holds the
// connection's state over them: the rest of a frame begun, the seal before a
// close frame, held frames flushed before a read waits.
//
// Invariants:
//   - the handshake ticket of every connection is closed exactly once, when
//     the connection ends (connections_open and maxConnections follow it);
//   - every concurrency lease taken by admission is released exactly once:
//     when the handler returns or panics, or when the connection dies;
//   - lock order: Server.mu, then conn.subsMu, then hub shard locks, then
//     conn.mu; no lock is held while writing to a socket, and neither
//     Server.mu nor a hub shard lock while the bus is told of interest in a
//     topic or a user (a sharded bus may wait for Redis; conn.subsMu may be
//     held, which delays only that connection's own subscription changes);
//   - a token's exp binds its connection (expiry.go, docs/authentication.md):
//     a connection whose token has an exp holds one tokenExpiry (one timer,
//     no goroutine), one without holds a nil pointer; the timer sends
//     tokenExpiring, then closes with 1008 "token expired", and refresh
//     moves it. Its callbacks run under tokenExpiry.mu (taken before
//     conn.mu), so once cleanup has stopped it nothing fires;
//   - a connection has at most one read goroutine at a time, and a parked
//     one is resumed exactly once however its wake-ups race (wsock.Parking:
//     the poller's readiness, any close of its socket); its cleanup runs
//     once, on the read goroutine that finds the socket ended (or on the
//     waker that took the client's close frame in its stead); s.wg counts
//     the connection, not its goroutines, from start to cleanup;
//   - built-ins (and refresh) run only on the read goroutine: a batch that
//     mixes them with application methods runs there too;
//   - a history topic's messages reach its local subscribers only through
//     the topic's sequencer (history.go), in offset order, each offset at
//     most once per subscription (history.Cursor); lock order there:
//     historyState.mu, topicSeq.mu, hsub.mu, conn.mu, and no lock is held
//     while the history store is called;
//   - authenticated connections are indexed by user (Server.users) from
//     addConn to removeConn, so the server API's Disconnect and Unsubscribe
//     (control.go) reach them on every instance; anonymous ones are not.
package server
