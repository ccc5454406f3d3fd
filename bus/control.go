package bus

import "github.com/rtserver/rtserver/protocol"

// Control messages are what the server API sends to the instances that may
// hold a user's connections (disconnect, unsubscribe). They travel on the
// same channels and Redis connections as data messages, as a second
// envelope kind, so they add no connection, and they never reach topic
// subscribers: the Receiver gets them through DeliverControl.
//
// A control message is routed by a key, a reserved name such as UserKey(U).
// The memory and single-channel buses hand every control message to every
// other instance. The sharded bus puts it on the key's partition, which an
// instance subscribes while it has declared interest in the key with
// Subscribe(key): the server does so for every user with a connection on
// it, so a user's control messages reach exactly the instances (and
// partitions) that can act on them.
//
// The control envelope has the data envelope's layout (see envelope.go)
// with version byte 0x02 and the key in the topic's place. An instance
// that predates control messages drops it as malformed (counted): during a
// rolling upgrade, control messages reach only upgraded instances.
const controlVersion = 0x02

// MaxControlKeyLen is the longest control key: the "__user:" prefix plus
// a user id of up to 1 KiB.
const MaxControlKeyLen = len(userKeyPrefix) + 1024

const userKeyPrefix = "__user:"

// UserKey is the control key of a user's connections. It is reserved (it
// starts with "__"), so no client can subscribe it.
func UserKey(user string) string { return userKeyPrefix + user }

// validControlKey reports whether key can route a control message.
func validControlKey(key string) bool {
	return len(key) <= MaxControlKeyLen && protocol.Reserved(key) && len(key) > 2
}

// appendControl appends the control envelope of one message to dst.
func appendControl(dst []byte, instance, key string, data []byte) []byte {
	b := appendEnvelope(dst, instance, key, data)
	b[len(dst)] = controlVersion
	return b
}

// isControl reports whether a received payload is a control envelope.
func isControl(p string) bool { return len(p) > 0 && p[0] == controlVersion }

// decodeControl splits a received control envelope like decodeEnvelope
// does a data envelope; the key must be a valid control key.
func decodeControl(p string, self string, maxBytes int) (key, data string, own bool, reason string) {
	return splitEnvelope(p, controlVersion, self, maxBytes, validControlKey)
}
