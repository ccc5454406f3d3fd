package protocol

// Wire words the server writes and the client reads besides the JSON-RPC
// messages (docs/protocol.md): declared once here, never retyped.

// BatchSubprotocol is the WebSocket subprotocol under which the server may
// send several queued messages in one text frame as a JSON array. The Go
// client offers it by default.
const BatchSubprotocol = "rt.batch"

// ReasonTokenExpired is the reason of the close 1008 that ends a
// connection whose token expired unrefreshed.
const ReasonTokenExpired = "token expired"

// Built-in methods a client calls.
const (
	MethodSubscribe   = "subscribe"
	MethodUnsubscribe = "unsubscribe"
	MethodPublish     = "publish"
	// MethodRefresh replaces the connection's token (docs/authentication.md).
	MethodRefresh = "refresh"
	// MethodHistory reads a history topic's messages (docs/history.md).
	MethodHistory = "history"
	// MethodPresence lists a topic's presence, MethodPresenceStats counts
	// it (docs/presence.md); the presence diff notification has the same
	// name (NotifyPresence).
	MethodPresence      = "presence"
	MethodPresenceStats = "presenceStats"
)

// Methods of the server API only (docs/server-api.md), the last element of
// the path /api/<method>; the API also takes MethodPublish,
// MethodUnsubscribe, MethodHistory, MethodPresence and MethodPresenceStats.
const (
	MethodBroadcast  = "broadcast"
	MethodDisconnect = "disconnect"
	MethodInfo       = "info"
)

// Methods of the notifications the server sends.
const (
	NotifyMessage  = "message"      // a message published on a subscribed topic
	NotifySystem   = "system"       // a system event (the Event* names)
	NotifyPresence = MethodPresence // a topic's coalesced joins and leaves (docs/presence.md)
)
