package history

import (
	"testing"

	"pgregory.net/rapid"
)

// The model: a topic's store holds offsets 1..published, minus those below
// trimmedBelow; the instance delivers live messages in increasing order
// from where it started, sometimes skipping one (a lost pub/sub message);
// a subscription recovers from since while all of that interleaves with
// its replay's page reads. Whatever the interleaving, it sees each offset
// at most once, in increasing order; and when no gap was reported, it saw
// every offset from since+1 to the last it saw.
func TestCursorDeliversEachOffsetOnceInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		since := rapid.Uint64Range(0, 20).Draw(t, "since")
		published := since + rapid.Uint64Range(0, 20).Draw(t, "missed")
		trimmedBelow := uint64(1)
		if rapid.Bool().Draw(t, "trimmed") {
			trimmedBelow = rapid.Uint64Range(1, published+1).Draw(t, "trimmedBelow")
		}
		// The instance's live position: behind the store, at it, or ahead
		// of what the replay will read.
		liveNext := rapid.Uint64Range(1, published+1).Draw(t, "liveNext")
		maxHeld := rapid.IntRange(1, 30).Draw(t, "maxHeld")
		pageSize := rapid.Uint64Range(1, 7).Draw(t, "pageSize")

		c := NewCursor(since)
		c.StartReplay(maxHeld)
		var got []uint64
		gapSeen := false
		deliver := func(ms []Message, gap bool) {
			gapSeen = gapSeen || gap
			for _, m := range ms {
				got = append(got, m.Offset)
			}
		}
		readFrom := since + 1
		replayDone := false
		for step := 0; step < 200 && (!replayDone || liveNext <= published); step++ {
			switch rapid.IntRange(0, 3).Draw(t, "event") {
			case 0: // a publish
				published++
			case 1: // a live delivery, or a lost one
				if liveNext > published {
					continue
				}
				if rapid.IntRange(0, 9).Draw(t, "lost") == 0 {
					liveNext++
					continue
				}
				m := Message{Offset: liveNext, Data: []byte("{}")}
				liveNext++
				if ok, gap := c.Live(m); ok {
					deliver([]Message{m}, gap)
				}
			case 2: // a page read
				if replayDone {
					continue
				}
				var page []Message
				for o := max(readFrom, trimmedBelow); o <= published && uint64(len(page)) < pageSize; o++ {
					page = append(page, Message{Offset: o, Data: []byte("{}")})
				}
				if len(page) == 0 {
					deliver(c.EndReplay())
					replayDone = true
					continue
				}
				readFrom = page[len(page)-1].Offset + 1
				deliver(c.Page(page))
			case 3: // a page read that races a duplicate live message
				if c.Last() > 0 {
					if ok, _ := c.Live(Message{Offset: c.Last()}); ok {
						t.Fatalf("a duplicate of %d was delivered", c.Last())
					}
				}
			}
		}
		if !replayDone {
			deliver(c.EndReplay())
		}
		for i, o := range got {
			if o <= since {
				t.Fatalf("delivered %d, at or before since %d", o, since)
			}
			if i > 0 && o <= got[i-1] {
				t.Fatalf("out of order or duplicate: %v", got)
			}
		}
		if !gapSeen {
			for i, o := range got {
				if o != since+1+uint64(i) {
					t.Fatalf("skipped an offset without reporting a gap: since %d, got %v", since, got)
				}
			}
		}
	})
}

func TestCursorLiveAfterReplay(t *testing.T) {
	c := NewCursor(3)
	c.StartReplay(10)
	if ok, _ := c.Live(Message{Offset: 6}); ok {
		t.Fatal("live message delivered during the replay")
	}
	out, gap := c.Page([]Message{{Offset: 2}, {Offset: 4}, {Offset: 5}})
	if gap || len(out) != 2 || out[0].Offset != 4 {
		t.Fatalf("page: %v gap %v", out, gap)
	}
	out, gap = c.EndReplay()
	if gap || len(out) != 1 || out[0].Offset != 6 {
		t.Fatalf("end: %v gap %v", out, gap)
	}
	if ok, gap := c.Live(Message{Offset: 7}); !ok || gap {
		t.Fatal("live 7 after 6")
	}
	if ok, _ := c.Live(Message{Offset: 7}); ok {
		t.Fatal("duplicate delivered")
	}
}

// A retired cursor (the stream was replaced) delivers nothing, live,
// replayed or held, until Reset; Reset makes it live again.
func TestRetiredCursorDeliversNothingUntilReset(t *testing.T) {
	c := NewCursor(5)
	c.StartReplay(10)
	c.Live(Message{Offset: 6})
	c.Retire()
	if !c.Retired() || c.Replaying() {
		t.Fatalf("retired %v replaying %v after Retire", c.Retired(), c.Replaying())
	}
	for _, off := range []uint64{1, 6, 7} {
		if ok, gap := c.Live(Message{Offset: off}); ok || gap {
			t.Errorf("Live(%d) on a retired cursor = %v, %v", off, ok, gap)
		}
	}
	if out, gap := c.Page([]Message{{Offset: 6}, {Offset: 7}}); out != nil || gap {
		t.Errorf("Page on a retired cursor = %v, %v", out, gap)
	}
	c.StartReplay(10)
	c.Live(Message{Offset: 8})
	if out, gap := c.EndReplay(); out != nil || gap {
		t.Errorf("EndReplay on a retired cursor = %v, %v", out, gap)
	}
	c.Reset(0)
	if ok, gap := c.Live(Message{Offset: 1}); !ok || gap || c.Retired() {
		t.Errorf("after Reset: Live(1) = %v, %v (retired %v)", ok, gap, c.Retired())
	}
}
