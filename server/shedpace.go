package server

import (
	"time"

	"github.com/rtserver/rtserver/protocol"
)

// Refusing a request must cost the server less than serving it, or
// shedding would not protect anybody. Deciding the refusal and encoding
// its answer take about a microsecond; what a client that hammers
// regardless costs is the socket work around it: a wake-up, a read(2)
// and a write(2) for every few requests, several times what the refusal
// itself costs. So a connection whose built-in requests keep being
// refused (shed or rate limited: -32001, -32002) is read at a pace:
// once refusedBeforePause of them came in a row, whenever it has no
// more input in hand its answers go out and its next read waits
// refusalPause. Whatever it sent meanwhile is then read, refused and
// answered in one wake-up, one read and one write. A client that heeds
// the retry hints never gets here. One that is admitted again is read at
// once from its next request on, but stays on probation: pacing ends for
// good only when a second request in a row is not refused, and a refusal
// right after the admitted one resumes it at once. A hammering client
// within reach of its rate (one admitted call every few paced reads)
// would otherwise earn refusedBeforePause unpaced refusals, each its own
// wake-up, read and write, after every admitted call: most of what it
// costs. Other connections are not affected: the pause holds only this
// connection's read goroutine.

// refusedBeforePause is how many built-in requests refused in a row make
// a connection read at a pace.
const refusedBeforePause = 16

// refusalPause is how long such a connection's next read waits once its
// input in hand is refused: shorter than any retry hint worth giving,
// long enough that what a hammering client sends meanwhile is read in
// one go.
const refusalPause = 10 * time.Millisecond

// paceEpoch is the origin of the grid that paused reads end on.
var paceEpoch = time.Now()

// pauseLeft is how long a pause that begins at since (time since
// paceEpoch) lasts: until the next tick of a grid of refusalPause that is
// at least half a pause away, so between half a pause and one and a half
// (one on average). Every paced connection's read then resumes on the
// same ticks: on a server that is otherwise quiet, five hammering clients
// cost one wake-up from idle per tick instead of five, and a wake-up
// from idle (the scheduler, the poller, the threads' sleep and waking)
// cost several times the refusals it served
// (docs/journal/latency-and-shedding.md).
func pauseLeft(since time.Duration) time.Duration {
	end := (since+refusalPause/2)/refusalPause*refusalPause + refusalPause
	return end - since
}

// countRefused counts a built-in request's outcome: refused by admission,
// or anything else (admitted, or refused for another reason). Anything
// else ends a run shorter than refusedBeforePause; a paced connection's
// count drops to one short of it instead (on probation: the next refusal
// paces it again, the next other outcome ends the run). Read goroutine
// only.
func (c *conn) countRefused(perr *protocol.Error) {
	switch {
	case perr != nil && (perr.Code == protocol.CodeOverloaded || perr.Code == protocol.CodeRateLimited):
		if c.refused < 255 {
			c.refused++
		}
	case c.refused >= refusedBeforePause:
		c.refused = refusedBeforePause - 1
	default:
		c.refused = 0
	}
}

// pauseRefused waits refusalPause before the next read of a connection
// whose requests keep being refused, unless it has input in hand: its
// held answers go out first, so its client sends more meanwhile. Read
// goroutine only.
func (c *conn) pauseRefused() {
	if !c.raw.HasReader() || c.raw.InputInHand() {
		return
	}
	c.s.refusalPauses.Add(1)
	c.raw.FlushHeld()
	c.raw.MuteInput(true)
	time.Sleep(pauseLeft(time.Since(paceEpoch)))
	c.raw.MuteInput(false)
}
