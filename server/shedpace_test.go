package server

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// The count of refusals in a row is the length of the outcomes' trailing
// run of admission refusals (-32001, -32002), up to 255: anything else
// (admitted, or refused for another reason) ends a run, except that a
// paced connection's first such outcome leaves it on probation, one
// refusal short of pacing: only a second one in a row ends the run.
func TestCountRefusedIsTheTrailingRun(t *testing.T) {
	outcomes := []*protocol.Error{
		nil,
		protocol.NewError(protocol.CodeOverloaded, "", nil),
		protocol.NewError(protocol.CodeRateLimited, "", nil),
		protocol.NewError(protocol.CodeForbidden, "", nil),
		protocol.NewError(protocol.CodeInvalidParams, "", nil),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		c := &conn{}
		run := 0
		for range r.IntN(600) {
			// Long refused runs are as likely as short ones.
			e := outcomes[r.IntN(len(outcomes))]
			if r.IntN(4) > 0 {
				e = outcomes[1+r.IntN(2)]
			}
			c.countRefused(e)
			switch {
			case e != nil && (e.Code == protocol.CodeOverloaded || e.Code == protocol.CodeRateLimited):
				run++
			case run >= refusedBeforePause:
				run = refusedBeforePause - 1
			default:
				run = 0
			}
			if want := min(run, 255); int(c.refused) != want {
				t.Fatalf("refused %d, want %d", c.refused, want)
			}
		}
	}
}

// A paced connection's admitted call is read at once, a refusal right
// after it paces the connection again, and two admitted calls in a row
// end the pacing: a later refusal starts a new run from one.
func TestPacingEndsAfterTwoAdmittedInARow(t *testing.T) {
	refused := protocol.NewError(protocol.CodeRateLimited, "", nil)
	c := &conn{}
	paced := func() bool { return c.refused >= refusedBeforePause }
	for range refusedBeforePause {
		c.countRefused(refused)
	}
	if !paced() {
		t.Fatalf("not paced after %d refusals", refusedBeforePause)
	}
	c.countRefused(nil)
	if paced() {
		t.Fatal("still paced after an admitted call")
	}
	c.countRefused(refused)
	if !paced() {
		t.Fatal("a refusal right after an admitted call did not pace again")
	}
	c.countRefused(nil)
	c.countRefused(nil)
	c.countRefused(refused)
	if c.refused != 1 {
		t.Fatalf("after two admitted calls and a refusal the run is %d, want 1", c.refused)
	}
}

// A client that keeps publishing while its publishes are refused gets
// every answer, in order, and is read at a pace once refusedBeforePause of
// them came in a row; the connection keeps working, and another client
// is unaffected.
func TestHammeringARefusalIsReadAtAPace(t *testing.T) {
	tr := newTier(t, "pub", message.Rule{Rate: &message.Rate{Limit: 1, Per: time.Hour, By: "conn"}}, map[string]string{MethodPublish: "pub"})
	s, url := startServer(t, Deps{Router: tr.router, Metrics: tr.m})
	abuser, innocent, listener := wstest.Dial(t, url), wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, listener.Call(MethodSubscribe, `{"topic":"calm"}`))

	const n = 4 * refusedBeforePause
	for i := 1; i <= n; i++ {
		abuser.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"publish","params":{"topic":"loud","data":%d}}`, i, i))
	}
	for i := 1; i <= n; i++ {
		f := abuser.Recv()
		if string(f.ID) != strconv.Itoa(i) {
			t.Fatalf("answer %d has id %s", i, f.ID)
		}
		switch {
		case i == 1 && f.Error != nil:
			t.Fatalf("first publish refused: %+v", f.Error)
		case i > 1 && (f.Error == nil || f.Error.Code != protocol.CodeRateLimited):
			t.Fatalf("publish %d answered %+v, want -32002", i, f)
		}
	}
	// The last answers went out just before a paced read.
	if s.refusalPauses.Load() == 0 {
		t.Fatalf("no paced read after %d refusals in a row", n-1)
	}
	// Still served: a call outside the class is admitted.
	wstest.MustOK(t, abuser.Call(MethodSubscribe, `{"topic":"loud"}`))
	wstest.MustOK(t, innocent.Call(MethodPublish, `{"topic":"calm","data":1}`))
	if got := listener.ExpectMessage("calm"); got != "1" {
		t.Fatalf("innocent's message %q", got)
	}
}

// A paused read ends on the process-wide grid of refusalPause, between
// half a pause and one and a half after it began: paced connections
// wake together, and each waits a pause on average.
func TestPauseEndsOnTheGrid(t *testing.T) {
	for _, since := range []time.Duration{0, 1, refusalPause/2 - 1, refusalPause / 2, refusalPause - 1, refusalPause,
		7*refusalPause + 3*time.Millisecond, 7*refusalPause + 6*time.Millisecond, 1<<40 + 12345} {
		d := pauseLeft(since)
		if d < refusalPause/2 || d > refusalPause*3/2 {
			t.Errorf("since %v: pause %v, want %v to %v", since, d, refusalPause/2, refusalPause*3/2)
		}
		if (since+d)%refusalPause != 0 {
			t.Errorf("since %v: pause %v ends off the grid", since, d)
		}
	}
}
