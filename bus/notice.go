package bus

// Notices are the unnumbered kind of control message: information
// another instance's subscribers may see (presence join/leave diffs),
// routed by a reserved key like a control message (a sharded bus puts it
// on the key's partition, for the instances that declared interest in
// the key), but neither numbered nor guarded against replay beyond the
// signed envelope's window: seeing one twice within the window is
// harmless, so a notice costs one PUBLISH and no fleet counter.
//
// Notices are best-effort (presence diffs are hints: docs/presence.md),
// and have a send queue of their own (noticeQueue): PublishNotice queues
// one and returns without waiting for Redis, and a full queue drops its
// oldest notice (counted, reason notice_overflow) for the new one. So a
// flood of notices (a presence churn) can neither take a data message's
// room in its queue (a plain publish is never refused because of it) nor
// keep its sender waiting. Its writers take control messages first, then
// data and notices alike (see redis_publish.go); a receiver checks and
// delivers notices on the data workers, by key, while control messages
// have a worker and a queue of their own. So a flood of notices can delay
// and drop only notices and data, never a disconnect or an unsubscribe;
// and the control path's per-message work (a fleet counter, the replay
// window) is paid only by control messages, whose rate is the server
// API's.
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

// noticeQueue bounds the notices waiting for a writer: one per presence
// topic with changes per diff interval, so room for a few thousand topics'
// diffs in one interval before the oldest go.
const noticeQueue = 4096

// publishNotice validates, encodes and queues one notice on the notices'
// own queue, and returns without waiting for Redis: nil once queued.
// A full queue drops its oldest notice for this one (counted).
func (e *engine) publishNotice(channel, key string, data []byte) error {
	if !validControlKey(key) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	m, err := e.encode(channel, key, data, 0, appendNotice)
	if err != nil {
		return err
	}
	return e.queueNotice(m)
}

// queueNotice puts m on the notice queue, making room by dropping the
// oldest queued notice when it is full. Nobody waits for a notice: it has
// no done.
func (e *engine) queueNotice(m outMsg) error {
	e.pubMu.RLock()
	defer e.pubMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	for {
		select {
		case e.noticeOut <- m:
			return nil
		default:
		}
		select {
		case <-e.noticeOut:
			e.dropNotice.Inc()
		default:
		}
	}
}

// NoticeEnvelope is the notice envelope an instance with that id and
// HMAC secret (nil: unsigned) publishes for key and data, as it goes on
// the bus's channel: for tools that feed a fleet's bus straight through
// Redis (a load generator of presence diffs). It checks neither key nor
// size.
func NoticeEnvelope(instance, key string, data, hmacSecret []byte) []byte {
	env := appendNotice(nil, instance, key, data)
	if s := newSigner(hmacSecret); s != nil {
		env = s.sign(env)
	}
	return env
}
