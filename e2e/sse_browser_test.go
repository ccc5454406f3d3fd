package e2e

// Server-Sent Events in headless Chromium: the browser's own EventSource
// and its own reconnect with Last-Event-ID. Time bounds are deadlines for
// conditions to become true, never races to win.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/cdptest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// needBrowser starts headless Chromium for one test.
func needBrowser(t *testing.T) *browser {
	t.Helper()
	testkit.Program(t, cdptest.ChromiumPath, "apt-get install chromium")
	b, err := cdptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// jsClientImport is a JavaScript expression that imports the JS client
// from the repository's source into a page served by rtserver, which
// serves no client of its own.
func jsClientImport(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../clients/js/rtclient.js")
	if err != nil {
		t.Fatal(err)
	}
	srcJSON, _ := json.Marshal(string(src))
	return `import(URL.createObjectURL(new Blob([` + string(srcJSON) + `], {type: "text/javascript"})))`
}

// A browser's EventSource, cut off by the server, reconnects by itself
// with the last event's id, and gets the messages it missed meanwhile,
// once each and in order, after what it had.
func TestSSEBrowserEventSourceRecovers(t *testing.T) {
	b := needBrowser(t)
	p := start(t, apiConfig+sseHistoryConfig)
	tok := wstest.HS256(apiSecret, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg := openPage(t, ctx, b, p.url("/healthz")) // any page of the server's origin
	pg.MustEval(t, ctx, `(() => {
		window.got = []; window.subs = [];
		const es = new EventSource("/sse?topic=room:a&token=`+tok+`");
		es.onmessage = (e) => got.push({id: e.lastEventId, offset: JSON.parse(e.data).offset, data: JSON.parse(e.data).data});
		es.addEventListener("subscribed", (e) => subs.push(JSON.parse(e.data)));
		return true;
	})()`, nil)
	pg.MustEval(t, ctx, until(`subs.length === 1`), nil)
	publish := func(i int) {
		t.Helper()
		code, body := postRPC(t, p, "", publishBody("room:a", strconv.Itoa(i)), "Authorization", "Bearer "+tok)
		if code != 200 || !strings.Contains(body, `"offset":`+strconv.Itoa(i)) {
			t.Fatalf("publish %d: %d %s", i, code, body)
		}
	}
	publish(1)
	publish(2)
	pg.MustEval(t, ctx, until(`got.length === 2`), nil)

	// The server ends alice's connections: the stream ends, and the
	// browser reconnects after its own delay (seconds), presenting the
	// last id; the two messages published meanwhile are recovered.
	if a := api(t, "http://"+p.Addr, "disconnect", apiKey, `{"user":"alice"}`); a.Status != 200 {
		t.Fatalf("disconnect: %+v", a)
	}
	publish(3)
	publish(4)
	pg.MustEval(t, ctx, until(`subs.length === 2 && got.length === 4`), nil)
	var res struct {
		Subs []struct {
			Recovered *bool
			Epoch     string
		}
		Got []struct {
			ID     string
			Offset int
			Data   int
		}
	}
	pg.MustEval(t, ctx, `({subs, got})`, &res)
	if r := res.Subs[1].Recovered; r == nil || !*r {
		t.Fatalf("the reconnect did not recover: %+v", res.Subs)
	}
	for i, g := range res.Got {
		want := fmt.Sprintf("%d:%s:room:a", i+1, res.Subs[0].Epoch)
		if g.Offset != i+1 || g.Data != i+1 || g.ID != want {
			t.Fatalf("message %d: %+v, want offset and data %d, id %s (all: %+v)", i, g, i+1, want, res.Got)
		}
	}
}

// The JavaScript client, in a page where no WebSocket gets through, falls
// back to Server-Sent Events and POST by itself, says so, and works with
// the same API: subscribe, publish with its answer, messages from others,
// errors with their codes.
func TestSSEBrowserClientFallsBack(t *testing.T) {
	b := needBrowser(t)
	p := start(t, apiConfig+sseHistoryConfig)
	tok := wstest.HS256(apiSecret, "alice")
	importClient := jsClientImport(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg := openPage(t, ctx, b, p.url("/healthz"))
	// Every WebSocket the page opens is answered 404 (as by a proxy that
	// refuses upgrades): the browser reports close 1006.
	pg.MustEval(t, ctx, `(async () => {
		const Real = WebSocket;
		window.WebSocket = class extends Real { constructor(u, p) { super(u.replace("/ws", "/blocked"), p); } };
		const m = await `+importClient+`;
		window.transports = []; window.got = [];
		window.c = m.connect("/ws", {token: "`+tok+`", minBackoffMs: 10, maxBackoffMs: 50,
			onTransport: (name, info) => transports.push({name, failures: info.failures})});
		c.subscribe("room:a", (data, topic, offset) => got.push({data, offset}));
		return true;
	})()`, nil)
	pg.MustEval(t, ctx, until(`c.transport === "sse" && c.state === "open"`), nil)
	var res struct {
		Transports []struct {
			Name     string
			Failures int
		}
		Published struct{ Offset int }
		Err       struct{ Code int }
	}
	pg.MustEval(t, ctx, `(async () => ({
		transports,
		published: await c.publish("room:a", "from the page"),
		err: await c.call("no.such.method").then(() => ({code: 0}), (e) => ({code: e.code})),
	}))()`, &res)
	if len(res.Transports) != 1 || res.Transports[0].Name != "sse" || res.Transports[0].Failures != 3 {
		t.Fatalf("transport events %+v, want one: sse after 3 failures", res.Transports)
	}
	if res.Published.Offset != 1 || res.Err.Code != -32601 {
		t.Fatalf("publish answered %+v, unknown method %+v", res.Published, res.Err)
	}
	code, body := postRPC(t, p, "", publishBody("room:a", `"from outside"`), "Authorization", "Bearer "+tok)
	if code != 200 || !strings.Contains(body, `"offset":2`) {
		t.Fatalf("outside publish: %d %s", code, body)
	}
	var got []struct {
		Data   string
		Offset int
	}
	pg.MustEval(t, ctx, until(`got.length === 2 && got`), &got)
	if got[0].Data != "from the page" || got[0].Offset != 1 || got[1].Data != "from outside" || got[1].Offset != 2 {
		t.Fatalf("messages %+v", got)
	}
}
