// Package client is a Go client for rtserver (docs/protocol.md):
// calls, topic subscriptions with in-order delivery, history and presence,
// and reconnection that honours the server's retry hints.
//
//	c, err := client.Dial(ctx, "ws://127.0.0.1:8080/ws", nil) // nil: DefaultOptions, reconnecting
//	if err != nil {
//		return err // *HandshakeError: the server's HTTP refusal and its retry hint
//	}
//	defer c.Close()
//	_, err = c.Subscribe(ctx, "room:1", func(topic string, data json.RawMessage) {
//		fmt.Println(topic, string(data)) // one goroutine, in order
//	})
//	err = c.Publish(ctx, "room:1", map[string]string{"text": "hi"})
//	err = c.Call(ctx, "app.method", params, &result) // your RPC handlers
//
// A nil *Options is DefaultOptions(): after a drop the client dials again
// with backoff and resubscribes every live subscription. Pass Options to
// set a token (Token, TokenFunc), handlers for system events, presence
// diffs and recoveries, or to turn reconnection off.
//
// History topics (docs/history.md): PublishAt publishes with an
// idempotency key and returns the message's Position; History reads what
// the topic stored; SubscribeSince subscribes after a position, replaying
// what came after it, and the subscription recovers what it missed after
// every reconnect (Options.OnRecovery says whether it could). See
// ExampleClient_History.
//
// Presence (docs/presence.md): PresenceAll lists the connections
// subscribed to a topic fleet-wide, PresenceStats counts them, and
// Options.OnPresence hears the joins and leaves of a joinLeave topic. See
// ExampleClient_PresenceAll.
//
// Errors: a server's refusal of a call is a *protocol.Error (switch on
// its Code: -32001 overloaded, -32002 rate limited, -32003 forbidden, ...);
// a call in flight when the connection drops fails with ErrDisconnected
// and is not retried (PublishAt excepted, which the server makes safe);
// Dial's *HandshakeError and *CloseError carry the server's retry hint.
//
// Authentication (docs/authentication.md): Options.TokenFunc is asked for a
// token on every connection attempt and whenever the server sends the
// system event tokenExpiring, which the client answers with the refresh
// method. A topic the server takes away (system event unsubscribed) is
// forgotten, not re-sent after a reconnect; a subscribe refused with
// -32003 is returned to the caller and never retried.
//
// # How it works
//
// History: a subscription keeps its position (Subscription.Position),
// advanced on the reader from every message's offset, resubscribes with
// recover and since after every reconnect and on the resync event, and
// drops any message at or before its position. PublishAt retries a
// publish that was shed or cut off by a reconnect with the same
// idempotencyKey: the one retry the client makes, because the server
// makes it safe.
//
// It owns: one WebSocket connection at a time per Client, the table of calls
// in flight on it, the set of live subscriptions (re-sent after every
// reconnect), the reconnect loop and its backoff, and the one goroutine that
// runs message and system handlers.
//
// It must never: retry a call silently (a call in flight when the connection
// drops fails with ErrDisconnected; the caller decides), reconnect after a
// refusal that will not change by waiting (HTTP 401/403 and other 4xx except
// 429; close codes 1002, 1003, 1007, 1008, 1009), or reconnect sooner than
// the server asked (Retry-After on 503/429, the close reason's hint on 1012/1013).
// The one exception is what a fresh token changes: with Options.TokenFunc
// a close 1008 "token expired" reconnects, and a 401 is retried once.
//
// Invariants:
//   - Goroutines: per Client one run loop (reconnect) and one dispatcher
//     (handlers), plus one reader per live connection. Every one is counted
//     in Client.wg; Close and CloseNow return only after all have exited.
//   - Handlers (Subscribe's h, Options.OnSystem) run on the dispatcher, one
//     at a time, in the order the frames arrived. The reader hands them over
//     through a buffered channel; when it is full the reader stops reading,
//     so backpressure reaches the server (which then applies its own
//     slow-consumer policy, close 1013) instead of memory growing here.
//   - Each pending call has a 1-buffered channel: the reader never blocks on
//     a caller. When a connection ends every pending call is answered
//     exactly once, with ErrDisconnected (or ErrClosed after Close).
//   - Lock order: Client.stateMu (held while OnState runs) before Client.mu
//     before conn.mu. Neither mu is held across I/O or a callback.
//   - Time only passes through Options.Sleep and the backoff uses
//     Options.Rand, so tests see every delay the client chooses.
package client
