package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
)

// apiPublish is the README's curl line: POST /api/publish with the key.
func apiPublish(t *testing.T, a *testApp, key, topic, data string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.url("/api/publish"), strings.NewReader(`{"topic":"`+topic+`","data":`+data+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "apikey "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func wantCode(t *testing.T, f wstest.Frame, code int, what string) {
	t.Helper()
	if f.Error == nil || f.Error.Code != code {
		t.Fatalf("%s: got %+v, want error %d", what, f.Error, code)
	}
}

// Signed-in users read their own private topic and nobody else's;
// everyone reads announcements; no client publishes anywhere; the server
// API feeds announcements and private topics (and nothing without the key).
func TestPrivateAndAnnounceTopics(t *testing.T) {
	leakcheck.Check(t)
	a := startApp(t, options{APIKey: "k3y", DemoAuth: "s3cret"}, "")
	dial := func(user string) *wstest.Conn {
		code, tok := get(t, a.url("/token?user="+user))
		if code != 200 {
			t.Fatalf("/token?user=%s: %d %s", user, code, tok)
		}
		return wstest.Dial(t, "ws://"+a.addr+"/ws?token="+tok)
	}
	alice, bob := dial("alice"), dial("bob")

	wstest.MustOK(t, alice.Call("subscribe", `{"topic":"user:alice"}`))
	wantCode(t, bob.Call("subscribe", `{"topic":"user:alice"}`), -32003, "bob subscribing to alice's topic")
	for _, c := range []*wstest.Conn{alice, bob} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"announce:all"}`))
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:lobby"}`))
	}
	for _, topic := range []string{"user:alice", "announce:all", "room:lobby"} {
		wantCode(t, alice.Call("publish", `{"topic":"`+topic+`","data":1}`), -32003, "a client publishing to "+topic)
	}

	if code := apiPublish(t, a, "k3y", "announce:all", `{"text":"maintenance at 22:00"}`); code != 200 {
		t.Fatalf("API publish: %d", code)
	}
	for _, c := range []*wstest.Conn{alice, bob} {
		if got := c.ExpectMessage("announce:all"); got != `{"text":"maintenance at 22:00"}` {
			t.Fatalf("announcement: %s", got)
		}
	}
	if code := apiPublish(t, a, "k3y", "user:alice", `{"text":"you have mail"}`); code != 200 {
		t.Fatalf("API publish: %d", code)
	}
	if got := alice.ExpectMessage("user:alice"); got != `{"text":"you have mail"}` {
		t.Fatalf("private message: %s", got)
	}
	if code := apiPublish(t, a, "wrong", "announce:all", `1`); code != 401 {
		t.Fatalf("API publish with a wrong key: %d, want 401", code)
	}
	// Bob got nothing private: his next frame answers his own request.
	bob.Send(`{"jsonrpc":"2.0","id":"fence","method":"unsubscribe","params":{"topic":"x"}}`)
	if f := bob.Recv(); string(f.ID) != `"fence"` {
		t.Fatalf("bob received %+v", f)
	}

	// /token refuses names that are not one plain topic segment; without
	// a token nobody connects.
	for _, bad := range []string{"", "a/b", "a:b", strings.Repeat("x", 41)} {
		if code, _ := get(t, a.url("/token?user="+bad)); code != 400 {
			t.Errorf("/token?user=%q: %d, want 400", bad, code)
		}
	}
	if code, _ := get(t, a.url("/ws")); code != 401 {
		t.Errorf("upgrade without a token: %d, want 401", code)
	}
}

// Without -demo-auth and -api-key there is neither /token nor /api/, and
// anonymous pages still read rooms and announcements.
func TestNoTokensOrAPIByDefault(t *testing.T) {
	a := startApp(t, options{}, "")
	if code, _ := get(t, a.url("/token?user=alice")); code != 404 && code != 405 {
		t.Errorf("/token without -demo-auth: %d", code)
	}
	if code := apiPublish(t, a, "", "announce:all", `1`); code == 200 {
		t.Errorf("/api/publish without -api-key answered 200")
	}
	c := wstest.Dial(t, "ws://"+a.addr+"/ws")
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"announce:all"}`))
	wantCode(t, c.Call("subscribe", `{"topic":"user:anyone"}`), -32003, "anonymous subscribing to a user topic")
}

// In the browser: a page signed in as alice (?user=alice, token from
// /token) shows an announcement and her private message, both published
// through the server API; bob's page shows the announcement only.
func TestPagesShowAnnouncementsAndPrivateMessages(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{APIKey: "k3y", DemoAuth: "s3cret"}, "")
	ctx := testContext(t, 30*time.Second)
	alice := openPage(t, ctx, b, a.url("/?room=r1&user=alice"))
	bob := openPage(t, ctx, b, a.url("/?room=r1&user=bob"))
	for _, p := range []*page{alice, bob} {
		p.MustEval(t, ctx, until(`chat.client.state === "open"`), nil)
	}
	if code := apiPublish(t, a, "k3y", "announce:all", `{"text":"maintenance at 22:00"}`); code != 200 {
		t.Fatalf("API publish: %d", code)
	}
	if code := apiPublish(t, a, "k3y", "user:alice", `{"text":"you have mail"}`); code != 200 {
		t.Fatalf("API publish: %d", code)
	}
	shown := func(p *page, list, text string) {
		t.Helper()
		var onPage bool
		p.MustEval(t, ctx, fmt.Sprintf(`%s.then(() => document.getElementById("log").textContent.includes(%q))`,
			until(fmt.Sprintf(`chat.%s.find(m => m.text === %q)`, list, text)), text), &onPage)
		if !onPage {
			t.Fatalf("%q arrived but is not on the page", text)
		}
	}
	shown(alice, "announcements", "maintenance at 22:00")
	shown(bob, "announcements", "maintenance at 22:00")
	shown(alice, "private", "you have mail")
	// chat.say still works for a signed-in page, and names the user.
	var said struct{ From string }
	bob.MustEval(t, ctx, `chat.say("hi")`, &said)
	if said.From != "bob" {
		t.Fatalf("chat.say from bob answered from %q", said.From)
	}
	shown(alice, "messages", "hi")
	var bobPrivate int
	bob.MustEval(t, ctx, `chat.private.length`, &bobPrivate)
	if bobPrivate != 0 {
		t.Fatalf("bob's page shows %d private messages of someone else", bobPrivate)
	}
}

// With -demo-auth, the page at the plain URL the server logs signs in
// under the guest name it shows and connects; it shows the announcement
// published before it opened. A name /token refuses is shown as the
// reason the page is not connected, not retried in silence.
func TestDemoAuthPageWithoutUserConnects(t *testing.T) {
	b := needBrowser(t)
	leakcheck.Check(t)
	a := startApp(t, options{APIKey: "k3y", DemoAuth: "s3cret"}, "")
	ctx := testContext(t, 30*time.Second)
	if code := apiPublish(t, a, "k3y", "announce:all", `{"text":"maintenance at 22:00"}`); code != 200 {
		t.Fatalf("API publish: %d", code)
	}
	p := openPage(t, ctx, b, a.url("/"))
	var got struct {
		User, Name string
		Shown      bool
	}
	p.MustEval(t, ctx, fmt.Sprintf(`%s.then(() => ({user: chat.user, name: document.getElementById("name").value,
		shown: document.getElementById("log").textContent.includes("maintenance at 22:00")}))`,
		until(`chat.client.state === "open" && chat.joined && chat.announcements.length > 0`)), &got)
	if !strings.HasPrefix(got.User, "guest") || got.Name != got.User || !got.Shown {
		t.Fatalf("page without ?user=: %+v, want signed in as the guest name it shows, announcement shown", got)
	}

	bad := openPage(t, ctx, b, a.url("/?user=not%20a%20name&minBackoffMs=50&maxBackoffMs=200"))
	var shown struct{ State, Error string }
	bad.MustEval(t, ctx, until(`document.getElementById("state").textContent.includes("cannot sign in") && {state: document.getElementById("state").textContent, error: document.getElementById("error").textContent}`), &shown)
	if !strings.Contains(shown.State, "cannot sign in as not a name") || !strings.Contains(shown.Error, "user must be") {
		t.Fatalf("a refused name shows state %q, error %q: want the reason", shown.State, shown.Error)
	}
}
