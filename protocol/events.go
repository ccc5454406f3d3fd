package protocol

// EventUnsubscribed is the system event sent to a connection that the
// server API took off a topic; its params carry the topic.
const EventUnsubscribed = "unsubscribed"

// AppendUnsubscribed appends the system notification
// {"event":"unsubscribed","topic":T}.
func AppendUnsubscribed(b []byte, topic string) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"system","params":{"event":"unsubscribed","topic":`...)
	b = appendString(b, topic)
	return append(b, "}}"...)
}
