package history

// Cursor is one subscription's place in a topic's stream: the last offset
// it delivered, and while a replay runs, the live messages held back
// until the replay has caught up. It is pure logic; the server calls it
// under the subscription's lock and delivers what it says, in the order
// it says.
//
// Recovery, the way it must go (docs/history.md):
//
//  1. the subscription is registered for live messages with a Cursor
//     from since.offset, and StartReplay holds them back;
//  2. the bus confirms the topic's subscription; only then is the store
//     read (a message published between reading the store and going live
//     would otherwise be lost);
//  3. pages of replayed messages go through Page, as the connection's send
//     queue makes room for them, until the store has no more;
//  4. EndReplay releases the held live messages that the replay did not
//     already deliver.
//
// Every offset is delivered at most once and in increasing order, whatever
// interleaving of live messages and pages happens; when a message is
// missing from what arrives (a trimmed stream, an instance gap, a hold
// buffer that overflowed), the method that notices reports gap, and the
// subscriber must be told to resync.
type Cursor struct {
	last      uint64
	replaying bool
	held      []Message
	maxHeld   int
	overflow  bool
	retired   bool
}

// NewCursor returns a live cursor whose last delivered offset is last.
func NewCursor(last uint64) Cursor { return Cursor{last: last} }

// Last is the last offset delivered.
func (c *Cursor) Last() uint64 { return c.last }

// Replaying reports whether live messages are held back.
func (c *Cursor) Replaying() bool { return c.replaying }

// StartReplay holds live messages back (at most maxHeld; past it they are
// dropped and the first live message after EndReplay reports the gap)
// until EndReplay.
func (c *Cursor) StartReplay(maxHeld int) {
	c.replaying, c.maxHeld, c.overflow = true, maxHeld, false
	c.held = c.held[:0]
}

// Skip moves the last delivered offset forward to last, without
// delivering anything: a subscription that goes live from the store's
// position instead of replaying.
func (c *Cursor) Skip(last uint64) {
	c.last = max(c.last, last)
}

// Reset makes the cursor live from last, discarding anything held and
// ending a retirement: a subscription that starts again.
func (c *Cursor) Reset(last uint64) {
	*c = Cursor{last: last}
}

// Retire stops the cursor, discarding anything held: the topic's stream
// was replaced (a new epoch), and none of the new stream's offsets may
// reach a subscription positioned in the old one, since its subscriber
// could not tell them from the old stream's. A retired cursor delivers
// nothing (Live, Page and EndReplay return nothing, with no gap: the
// subscriber has been told to resync) until Reset.
func (c *Cursor) Retire() {
	*c = Cursor{last: c.last, retired: true}
}

// Retired reports whether the cursor was retired and not Reset since.
func (c *Cursor) Retired() bool { return c.retired }

// Live takes a live message. It reports whether to deliver it now; gap
// is true when it skips offsets after the last delivered one (delivered
// all the same: the subscriber must resync to get what was skipped).
// While replaying, the message is held instead.
func (c *Cursor) Live(m Message) (deliver, gap bool) {
	if c.retired || m.Offset <= c.last {
		return false, false
	}
	if c.replaying {
		switch {
		case len(c.held) > 0 && m.Offset <= c.held[len(c.held)-1].Offset:
			// Already held: live delivery never goes backwards.
		case len(c.held) >= c.maxHeld:
			c.overflow = true
		default:
			c.held = append(c.held, m)
		}
		return false, false
	}
	gap = m.Offset != c.last+1
	c.last = m.Offset
	return true, gap
}

// Page takes a page of replayed messages (ascending offsets) and returns
// the ones to deliver now: those after the last delivered. gap is true
// when the first of them skips offsets (the stream was trimmed under the
// replay).
func (c *Cursor) Page(ms []Message) (deliver []Message, gap bool) {
	if c.retired {
		return nil, false
	}
	i := 0
	for i < len(ms) && ms[i].Offset <= c.last {
		i++
	}
	ms = ms[i:]
	if len(ms) == 0 {
		return nil, false
	}
	// Pages come from one ordered read; keep only an ascending run.
	n := 1
	for n < len(ms) && ms[n].Offset > ms[n-1].Offset {
		n++
	}
	ms = ms[:n]
	gap = ms[0].Offset != c.last+1
	for j := 1; j < len(ms); j++ {
		gap = gap || ms[j].Offset != ms[j-1].Offset+1
	}
	c.last = ms[len(ms)-1].Offset
	return ms, gap
}

// EndReplay goes live: it returns the held messages that the replay did
// not deliver, in order, and gap when they do not follow on from the last
// replayed one. The returned slice is valid until the next call.
func (c *Cursor) EndReplay() (deliver []Message, gap bool) {
	c.replaying = false
	held := c.held
	c.held = nil
	if c.retired {
		return nil, false
	}
	i := 0
	for i < len(held) && held[i].Offset <= c.last {
		i++
	}
	held = held[i:]
	if c.overflow {
		// Live messages after the held ones were dropped: the subscriber
		// gets what was held, and must resync for the rest.
		c.overflow = false
		if len(held) > 0 {
			c.last = held[len(held)-1].Offset
		}
		return held, true
	}
	if len(held) == 0 {
		return nil, false
	}
	gap = held[0].Offset != c.last+1
	for j := 1; j < len(held); j++ {
		gap = gap || held[j].Offset != held[j-1].Offset+1
	}
	c.last = held[len(held)-1].Offset
	return held, gap
}
