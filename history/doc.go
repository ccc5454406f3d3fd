// Package history keeps a short stream of messages per topic, so that a
// client that reconnects gets every message it missed, exactly once and in
// order, or is told plainly that it cannot (docs/history.md).
//
// It owns:
//   - positions: every message of a history topic has an offset,
//     consecutive from 1, and the topic has an epoch, a short random
//     string that changes whenever the stream's continuity cannot be
//     vouched for; (epoch, offset) names a place in the stream on every
//     instance;
//   - the stores: Memory (in the process, the embedded default: a restart
//     changes every epoch) and Redis (one script per publish stores the
//     message, assigns its offset and publishes it to the other instances
//     in one atomic step);
//   - the stored-message encoding (DecodeStored never panics on untrusted
//     bytes: FuzzDecodeStored);
//   - Cursor, the pure logic of one subscription's place in a stream: live
//     messages buffered while a replay runs, replayed pages, then the
//     buffer merged, so each offset is delivered exactly once, in order.
//
// It must never deliver to connections itself (the server does, from what
// a Cursor says), never block a publisher on a slow subscriber, and never
// hand out an offset that was not assigned in the same step that stored
// the message.
//
// Bounds: a stream holds at most Policy.Size messages, none older than
// Policy.TTL; the memory store holds at most Config.MemoryMaxBytes in all,
// beyond which the least recently published topics lose their streams
// (and get a new epoch), counted in history_evictions_total.
package history
