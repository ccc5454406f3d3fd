package main

// Browser tests of history and recovery (docs/history.md): the chat page
// and the browser client across a server restart, with Redis (nothing is
// lost) and with the memory bus (the page says it could not recover, and
// reloads).

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
)

// roomMessage is what the publisher sends, numbered by At.
func roomMessage(room string, i int) []byte {
	return fmt.Appendf(nil, `{"room":%q,"from":"publisher","text":"m%d","at":%d}`, room, i, i)
}

// Two instances on one redis-server: a page on A, a publisher on B sending
// numbered messages. A is drained (1012) and restarted on the same address
// while the publisher goes on; the page reconnects, recovers and ends with
// every message exactly once, in order.
func TestBrowserRecoversEveryMessageAcrossRestart(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	r := redistest.Start(t)
	a := startApp(t, options{Redis: r.URL()}, "")
	pub := startApp(t, options{Redis: r.URL()}, "")
	ctx := testContext(t, 90*time.Second)
	p := openPage(t, ctx, b, a.url("/?room=rec&minBackoffMs=50&maxBackoffMs=500"))
	p.MustEval(t, ctx, until(`chat.joined === "rec"`), nil)

	const n = 2000
	restartAt := make(chan struct{})
	published := make(chan error, 1)
	start := time.Now()
	go func() {
		// About 1,000 messages a second: the restart lands in the middle.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 1; i <= n; i++ {
			if err := pub.node.Publish("room:rec", roomMessage("rec", i)); err != nil {
				published <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
			if i == n/4 {
				close(restartAt)
			}
			<-tick.C
		}
		published <- nil
	}()

	<-restartAt
	if err := a.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	var missedFrom int
	p.MustEval(t, ctx, `chat.messages.length`, &missedFrom)
	startApp(t, options{Redis: r.URL()}, a.addr)
	if err := <-published; err != nil {
		t.Fatal(err)
	}

	var got struct {
		At         []int
		Closes     []struct{ Code int }
		Recoveries []struct {
			Topic     string
			Recovered bool
			Reason    string
		}
		Connects int
	}
	if err := p.Eval(ctx, fmt.Sprintf(`(%s)(() => chat.messages.length >= %d, 60000)`, untilJS, n), nil); err != nil {
		var state string
		p.MustEval(t, ctx, `JSON.stringify({shown: chat.messages.length, last: chat.messages.slice(-3).map(m => m.at), states: chat.states,
			closes: chat.closes, recoveries: chat.recoveries, errors: chat.errors, system: chat.system})`, &state)
		t.Fatalf("%v\npage: %s", err, state)
	}
	p.MustEval(t, ctx, `({at: chat.messages.map(m => m.at), closes: chat.closes,
		recoveries: chat.recoveries.filter(r => r.topic === "room:rec"), connects: chat.connects})`, &got)
	elapsed := time.Since(start)
	if len(got.At) != n {
		t.Fatalf("the page shows %d messages, want %d", len(got.At), n)
	}
	for i, at := range got.At {
		if at != i+1 {
			t.Fatalf("message %d on the page is number %d: not each once in order (%v...)", i+1, at, got.At[max(0, i-3):min(len(got.At), i+4)])
		}
	}
	if got.Connects < 2 || len(got.Closes) == 0 || got.Closes[0].Code != 1012 {
		t.Fatalf("the page was not drained and reconnected: connects %d, closes %+v", got.Connects, got.Closes)
	}
	if len(got.Recoveries) == 0 {
		t.Fatal("no recovery reported")
	}
	for _, rc := range got.Recoveries {
		if !rc.Recovered {
			t.Fatalf("recoveries %+v: want every one recovered", got.Recoveries)
		}
	}
	var shown int
	p.MustEval(t, ctx, `document.querySelectorAll("#log li:not(.notice):not(.announce)").length`, &shown)
	if shown != n {
		t.Fatalf("%d messages in the log, want %d", shown, n)
	}
	t.Logf("%d messages, 1 restart (drained at message %d; the page had %d when its instance stopped), %d recoveries (the join's and the reconnect's), all on the page in order after %v",
		n, n/4, missedFrom, len(got.Recoveries), elapsed.Round(time.Millisecond))
}

// With the memory bus a restart loses the history: the page's recovery
// answers recovered false, the page says so where it is seen, keeps what
// it showed (the messages read, the announcement), marks the gap in the
// log, and goes on with the room as it is now.
func TestBrowserSaysWhenItCouldNotRecover(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{}, "")
	ctx := testContext(t, 40*time.Second)
	p := openPage(t, ctx, b, a.url("/?room=mem&minBackoffMs=50&maxBackoffMs=500"))
	p.MustEval(t, ctx, until(`chat.joined === "mem"`), nil)
	p.MustEval(t, ctx, `chat.say("before the restart").then(() => true)`, nil)
	p.MustEval(t, ctx, until(`chat.messages.some(m => m.text === "before the restart")`), nil)

	if err := a.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	next := startApp(t, options{}, a.addr)
	// Before or after the page is back (either way it must show it once).
	if err := next.node.Publish("room:mem", roomMessage("mem", 1)); err != nil {
		t.Fatal(err)
	}
	var notice string
	p.MustEval(t, ctx, fmt.Sprintf(`%s.then(() => document.getElementById("notice").textContent)`,
		until(`chat.reloaded === "mem"`)), &notice)
	if !strings.Contains(notice, "Could not recover") {
		t.Fatalf("notice %q: want it to say the messages could not be recovered", notice)
	}
	var rec struct {
		Recovered bool
		Reason    string
	}
	// The recovery after the restart (the first was the join's).
	p.MustEval(t, ctx, `chat.recoveries.filter(r => r.topic === "room:mem")[1]`, &rec)
	if rec.Recovered || rec.Reason != "epoch" {
		t.Fatalf("recovery %+v: want recovered false, reason epoch", rec)
	}
	if err := next.node.Publish("room:mem", roomMessage("mem", 2)); err != nil {
		t.Fatal(err)
	}
	var texts []string
	p.MustEval(t, ctx, fmt.Sprintf(`%s.then(() => chat.messages.map(m => m.text))`, until(`chat.messages.some(m => m.text === "m2")`)), &texts)
	if !slices.Equal(texts, []string{"before the restart", "m1", "m2"}) {
		t.Fatalf("after the reload the room shows %q, want the message read before the restart, then m1 and m2", texts)
	}
	// The log, in order: the message read, the gap marker, the messages
	// since the restart; each once.
	var log []string
	p.MustEval(t, ctx, `[...document.querySelectorAll("#log li:not(.announce)")].filter(li => !li.classList.contains("notice") || li.classList.contains("gap")).map(li => li.classList.contains("gap") ? "gap" : li.textContent)`, &log)
	if want := []string{"guestbefore the restart", "gap", "m1", "m2"}; len(log) != 4 || log[1] != "gap" || !strings.HasSuffix(log[0], "before the restart") || !strings.HasSuffix(log[2], "m1") || !strings.HasSuffix(log[3], "m2") {
		t.Fatalf("log after the reload %q, want %q: what was read kept, the gap marked", log, want)
	}
}

// A page joining a room shows its recent messages, oldest first, then the
// live ones; a page opened after an announcement shows it too.
func TestJoiningShowsRecentMessages(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{}, "")
	ctx := testContext(t, 30*time.Second)
	for i := 1; i <= 60; i++ {
		if err := a.node.Publish("room:old", roomMessage("old", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.node.Publish("announce:all", []byte(`{"text":"maintenance at 22:00"}`)); err != nil {
		t.Fatal(err)
	}
	p := openPage(t, ctx, b, a.url("/?room=old"))
	p.MustEval(t, ctx, until(`chat.joined === "old"`), nil)
	if err := a.node.Publish("room:old", roomMessage("old", 61)); err != nil {
		t.Fatal(err)
	}
	var at []int
	p.MustEval(t, ctx, fmt.Sprintf(`%s.then(() => chat.messages.map(m => m.at))`, until(`chat.messages.some(m => m.at === 61)`)), &at)
	// The newest 50 before the page came, then the live one.
	if len(at) != 51 || at[0] != 11 || at[50] != 61 {
		t.Fatalf("the page shows messages %v, want 11..61", at)
	}
	for i := 1; i < len(at); i++ {
		if at[i] != at[i-1]+1 {
			t.Fatalf("the page shows messages %v: not each once in order", at)
		}
	}
	p.MustEval(t, ctx, until(`document.getElementById("log").textContent.includes("maintenance at 22:00")`), nil)
}
