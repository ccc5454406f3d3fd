package bus

// Notices are the unnumbered kind of control message: information
// another instance's subscribers may see (presence join/leave diffs),
// routed by a reserved key like a control message (a sharded bus puts it
// on the key's partition, for the instances that declared interest in
// the key), but neither numbered nor guarded against replay beyond the
// signed envelope's window: seeing one twice within the window is
// harmless, so a notice costs one PUBLISH and no fleet counter.
//
// Notices never share a lane with control messages. A sender queues them
// with data messages, and its writers take control messages first (see
// redis_publish.go); a receiver checks and delivers them on the data
// workers, by key, while control messages have a worker and a queue of
// their own. So a flood of notices (a presence churn) can delay and drop
// only notices and data, never a disconnect or an unsubscribe; and the
// control path's per-message work (a fleet counter, the replay window)
// is paid only by control messages, whose rate is the server API's.
//
// The notice envelope is the data envelope's layout (see envelope.go)
// with version byte 0x05 and the key in the topic's place. It is signed
// like a data envelope; the version byte is under the MAC, so neither
// kind can be taken for the other. An instance that predates notices
// drops them as malformed (counted): during a rolling upgrade, presence
// diffs from upgraded instances reach only upgraded ones.
const noticeVersion = 0x05

// appendNotice appends the notice envelope of one message to dst.
func appendNotice(dst []byte, instance, key string, data []byte) []byte {
	return append(appendHeader(dst, noticeVersion, instance, key), data...)
}

// decodeNotice splits a received notice envelope like decodeEnvelope does
// a data envelope; the key must be a valid control key.
func decodeNotice(p string, self string, maxBytes int) (key, data string, own bool, reason string) {
	return splitEnvelope(p, noticeVersion, self, maxBytes, validControlKey)
}

// publishNotice validates, encodes and queues one notice with the data
// messages, and waits for Redis to take it.
func (e *engine) publishNotice(channel, key string, data []byte) error {
	if !validControlKey(key) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	return e.enqueue(e.queue, channel, key, data, 0, appendNotice)
}
