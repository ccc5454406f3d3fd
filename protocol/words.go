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
)

// Methods of the notifications the server sends.
const (
	NotifyMessage = "message" // a message published on a subscribed topic
	NotifySystem  = "system"  // a system event (the Event* names)
)
