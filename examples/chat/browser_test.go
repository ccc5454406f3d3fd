package main

// End-to-end tests in headless Chromium: the chat page, the browser client
// (clients/js) and the example server, driven over the DevTools protocol.
// Time bounds here are lower bounds (a slow machine only widens them) or
// deadlines for conditions to become true; none is a race to win.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The client's own tests (clients/js/rtclient_test.js) pass in the
// browser, live ones included, against the example serving the page.
func TestClientUnitTestsInBrowser(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{}, "")
	ctx := testContext(t, 30*time.Second)
	p := openPage(t, ctx, b, a.url("/test/blank.html"))
	var res struct {
		Passed   int
		Failures []string
	}
	p.MustEval(t, ctx, `import(location.origin + "/clients/js/rtclient_test.js").then(m => m.run({url: location.origin.replace(/^http/, "ws") + "/ws"}))`, &res)
	for _, f := range res.Failures {
		t.Error(f)
	}
	if res.Passed == 0 {
		t.Fatal("no JavaScript test passed")
	}
	t.Logf("%d JavaScript tests passed", res.Passed)
}

// Two pages in one room: what one says, the other shows, over the real
// server; bad params and the class's rate limit come back as JSON-RPC
// errors with their codes and data.
func TestTwoPagesChat(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{}, "")
	ctx := testContext(t, 30*time.Second)
	alice := openPage(t, ctx, b, a.url("/?room=r1&name=alice"))
	// Bob offers rt.batch, so the server may batch what it sends him.
	bob := openPage(t, ctx, b, a.url("/?room=r1&name=bob&batch=1"))
	for _, p := range []*page{alice, bob} {
		p.MustEval(t, ctx, until(`chat.client.state === "open"`), nil)
	}

	var said struct{ From, Text, Room string }
	alice.MustEval(t, ctx, `chat.say("hello from alice")`, &said)
	if said.From != "alice" || said.Text != "hello from alice" || said.Room != "r1" {
		t.Fatalf("chat.say answered %+v", said)
	}
	seen := func(p *page, text string) {
		t.Helper()
		var got struct {
			From string
			DOM  bool
		}
		p.MustEval(t, ctx, fmt.Sprintf(`%s.then(m => ({from: m.from, dom: document.getElementById("log").textContent.includes(%q)}))`,
			until(fmt.Sprintf(`chat.messages.find(m => m.text === %q)`, text)), text), &got)
		if !got.DOM {
			t.Fatalf("%q arrived but is not on the page", text)
		}
	}
	seen(bob, "hello from alice")
	seen(alice, "hello from alice") // the sender is subscribed too

	// Bob answers through the form, as a person would.
	bob.MustEval(t, ctx, `document.getElementById("text").value = "hi alice"; document.getElementById("say").requestSubmit(); true`, nil)
	seen(alice, "hi alice")

	var bad struct {
		Code    int
		Message string
	}
	alice.MustEval(t, ctx, `chat.client.call("chat.say", {room: "", text: "x"}).then(() => ({code: 0}), e => ({code: e.code, message: e.message}))`, &bad)
	if bad.Code != -32602 {
		t.Fatalf("chat.say with an empty room: %+v, want -32602", bad)
	}

	// 5 per second per user (per IP, anonymous): a burst of 12 is cut.
	var burst []struct {
		Code int
		Data struct {
			Class        string
			RetryAfterMs int
		}
	}
	alice.MustEval(t, ctx, `Promise.all(Array.from({length: 12}, (_, i) => chat.say("burst " + i).then(() => ({code: 0}), e => ({code: e.code, data: e.data}))))`, &burst)
	limited := 0
	for _, r := range burst {
		switch r.Code {
		case 0:
		case -32002:
			limited++
			if r.Data.Class != "chat" || r.Data.RetryAfterMs <= 0 {
				t.Fatalf("RATE_LIMITED data %+v", r.Data)
			}
		default:
			t.Fatalf("burst answered %+v", r)
		}
	}
	if limited == 0 {
		t.Fatalf("a burst of %d passed a 5/s limit", len(burst))
	}
}

// A full server in close mode: the second page's upgrade completes and is
// closed with 1013 and retry_after_ms=N, and the client's next attempt
// comes no sooner than N after the close (timestamps taken in the page by
// a wrapper around WebSocket, not by the client itself). Once the slot is
// free the page gets in.
func TestFullServerCloseModeHonoursHint(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{MaxConnections: 1, Reject: "close"}, "")
	ctx := testContext(t, 40*time.Second)
	holder := openPage(t, ctx, b, a.url("/?room=full"))
	holder.MustEval(t, ctx, until(`chat.client.state === "open"`), nil)

	shed := openPage(t, ctx, b, a.url("/test/blank.html"))
	shed.MustEval(t, ctx, `(async () => {
		const rec = window.rec = {opens: [], closes: [], states: []};
		const Native = window.WebSocket;
		window.WebSocket = class extends Native {
			constructor(url, protocols) {
				rec.opens.push(performance.now());
				super(url, protocols);
				// Registered before the client's onclose: this time is no
				// later than the one the client measures its wait from.
				this.addEventListener("close", ev => rec.closes.push({at: performance.now(), code: ev.code, reason: ev.reason}));
			}
		};
		const { connect } = await import(location.origin + "/clients/js/rtclient.js");
		window.client = connect("/ws", {minBackoffMs: 50, maxBackoffMs: 2000,
			onState: (s, info) => rec.states.push({s, ...info})});
		return true;
	})()`, nil)

	const cycles = 2
	var rec struct {
		Opens  []float64
		Closes []struct {
			At     float64
			Code   int
			Reason string
		}
		States []struct {
			S            string
			Code         int
			RetryAfterMs int
		}
	}
	shed.MustEval(t, ctx, until(fmt.Sprintf(`rec.closes.length >= %d && rec.opens.length >= %d && rec`, cycles, cycles+1)), &rec)
	for i := range cycles {
		c := rec.Closes[i]
		var hint int
		if c.Code != 1013 || !strings.HasPrefix(c.Reason, "retry_after_ms=") {
			t.Fatalf("close %d: %d %q, want 1013 retry_after_ms=N", i, c.Code, c.Reason)
		}
		if _, err := fmt.Sscanf(c.Reason, "retry_after_ms=%d", &hint); err != nil || hint <= 0 {
			t.Fatalf("close %d: reason %q", i, c.Reason)
		}
		if !(rec.Opens[i] <= c.At) {
			t.Fatalf("close %d at %.1f before its attempt at %.1f", i, c.At, rec.Opens[i])
		}
		if gap := rec.Opens[i+1] - c.At; gap < float64(hint) {
			t.Fatalf("attempt %d came %.1f ms after a close hinting %d ms", i+1, gap, hint)
		}
	}
	// The client reported the hint it honoured.
	if i := slices.IndexFunc(rec.States, func(s struct {
		S            string
		Code         int
		RetryAfterMs int
	}) bool {
		return s.S == "disconnected"
	}); i < 0 || rec.States[i].Code != 1013 || rec.States[i].RetryAfterMs <= 0 {
		t.Fatalf("client states %+v", rec.States)
	}

	// Free the slot: the shed page gets in on a later attempt.
	holder.MustEval(t, ctx, `chat.client.close(); true`, nil)
	shed.MustEval(t, ctx, until(`client.state === "open"`), nil)
}

// A drain (the example's context ending, as SIGTERM does) closes every
// page with 1012 spread over the window, after telling each it is
// draining; the pages reconnect to the instance that replaces it and get
// their room's messages again (their subscription was re-sent).
func TestDrainSpreadsPagesAndTheyReconnect(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	const window = 2 * time.Second
	a := startApp(t, options{Drain: window}, "")
	ctx := testContext(t, 40*time.Second)
	const n = 6
	pages := make([]*page, n)
	for i := range pages {
		pages[i] = openPage(t, ctx, b, a.url("/?room=drain&minBackoffMs=50&maxBackoffMs=500"))
	}
	for _, p := range pages {
		p.MustEval(t, ctx, until(`chat.client.state === "open"`), nil)
	}

	a.cancel()
	testkit.Eventually(t, 10*time.Second, "readyz 503 while draining", func() bool {
		code, _ := get(t, a.url("/readyz"))
		return code == http.StatusServiceUnavailable
	})
	if code, _ := get(t, a.url("/")); code != http.StatusOK {
		t.Fatalf("the page is not served while draining: %d", code)
	}

	var times []float64
	for i, p := range pages {
		var r struct {
			Close struct {
				At           float64
				Code         int
				RetryAfterMs int
			}
			Draining struct {
				Event            string
				ReconnectAfterMs int
			}
		}
		p.MustEval(t, ctx, until(`chat.closes.length > 0 && {close: chat.closes[0], draining: chat.system.find(e => e.event === "draining")}`), &r)
		if r.Close.Code != 1012 || r.Close.RetryAfterMs <= 0 {
			t.Fatalf("page %d closed with %+v, want 1012 and a hint", i, r.Close)
		}
		if r.Draining.Event != "draining" || r.Draining.ReconnectAfterMs <= 0 {
			t.Fatalf("page %d was not told it was draining: %+v", i, r.Draining)
		}
		times = append(times, r.Close.At)
	}
	if err := a.stop(); err != nil {
		t.Fatalf("serve after the drain: %v", err)
	}
	// Spread, not all at once: with 6 closes at i/6 of the window the span
	// is 5/6 of it. A slow machine only widens it.
	slices.Sort(times)
	if span := time.Duration((times[n-1] - times[0]) * float64(time.Millisecond)); span < window/2 {
		t.Fatalf("closes spanned %v of a %v drain window: not spread", span, window)
	}

	// The replacement instance on the same address.
	next := startApp(t, options{}, a.addr)
	for _, p := range pages {
		p.MustEval(t, ctx, until(`chat.connects >= 2 && chat.client.state === "open"`), nil)
	}
	if err := next.node.Publish("room:drain", []byte(`{"room":"drain","from":"server","text":"after the restart","at":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		p.MustEval(t, ctx, until(`chat.messages.some(m => m.text === "after the restart")`), nil)
	}
}

// A page whose tokens live three seconds stays connected through several
// of them: rtclient.js answers each tokenExpiring with a token from its
// token function and the refresh method, and never reconnects.
func TestBrowserRefreshesShortLivedTokens(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{DemoAuth: "s3cret", TokenTTL: 3 * time.Second, RefreshNotice: time.Second}, "")
	ctx := testContext(t, 30*time.Second)
	p := openPage(t, ctx, b, a.url("/test/blank.html"))
	var res struct {
		Notices, Tokens, Drops int
		State                  string
	}
	p.MustEval(t, ctx, `import(location.origin + "/clients/js/rtclient.js").then((m) => new Promise((resolve) => {
		const r = { notices: 0, tokens: 0, drops: 0 };
		const c = m.connect("/ws", {
			token: async () => { r.tokens++; return (await fetch("/token?user=ann")).text(); },
			onState: (s) => { if (s === "disconnected") r.drops++; },
			onSystem: (ev) => {
				if (ev.event !== "tokenExpiring" || ++r.notices < 3) return;
				r.state = c.state;
				c.close();
				resolve(r);
			},
		});
	}))`, &res)
	// Three notices on one connection: the second and third each follow
	// a refresh (an unrefreshed connection is closed at exp instead).
	if res.Notices != 3 || res.Drops != 0 || res.State != "open" || res.Tokens < 3 {
		t.Fatalf("%+v: want 3 notices on one open connection, no drop, a token per connect and refresh", res)
	}
}

// Pages show who is in the room: the list loads on join and follows the
// presence notifications as people come and go. Signed in, by user;
// anonymous (the default), by the name each page connected with.
func TestPagesShowWhoIsInTheRoom(t *testing.T) {
	b := needBrowser(t)
	for _, tc := range []struct {
		name  string
		opts  options
		param string
	}{{"signed in", options{DemoAuth: "s3cret"}, "user"}, {"anonymous", options{}, "name"}} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			a := startApp(t, tc.opts, "")
			ctx := testContext(t, 30*time.Second)
			alice := openPage(t, ctx, b, a.url("/?room=r2&"+tc.param+"=alice"))
			bob := openPage(t, ctx, b, a.url("/?room=r2&"+tc.param+"=bob"))
			who := func(p *page, want string) {
				t.Helper()
				p.MustEval(t, ctx, until(fmt.Sprintf(`document.getElementById("who").textContent === %q`, want)), nil)
			}
			who(alice, "in the room: 2alicebob")
			who(bob, "in the room: 2alicebob")
			alice.MustEval(t, ctx, `chat.join("elsewhere").then(() => true)`, nil)
			who(bob, "in the room: 1bob")
			who(alice, "in the room: 1alice")
		})
	}
}
