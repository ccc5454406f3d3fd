package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// presenceConfig keeps presence (with diffs) in room:*, and presence in
// secret:*, where nobody may subscribe; the ttl is short so an instance's
// death shows in seconds.
const presenceConfig = `topics:
  namespaces:
    - {pattern: "room:*", subscribe: [any], publish: [any], presence: true, joinLeave: true}
    - {pattern: "secret:*", subscribe: [], publish: [], presence: true}
presence: {ttl: 3s, diffInterval: 1s}
`

type presenceEntry struct {
	Client string `json:"client"`
	User   string `json:"user"`
}

type presencePage struct {
	Clients []presenceEntry `json:"clients"`
	Cursor  string          `json:"cursor"`
}

type presenceStats struct {
	Clients int `json:"clients"`
	Users   int `json:"users"`
}

func decodeResult(t *testing.T, f wstest.Frame, v any) {
	t.Helper()
	wstest.MustOK(t, f)
	if err := json.Unmarshal(f.Result, v); err != nil {
		t.Fatalf("result %s: %v", f.Result, err)
	}
}

// fleetPresence is what c sees of topic: every page, and the stats.
func fleetPresence(t *testing.T, c *wstest.Conn, topic string) (users []string, clients map[string]bool, st presenceStats) {
	t.Helper()
	clients = map[string]bool{}
	cursor := ""
	for {
		var p presencePage
		decodeResult(t, c.Call("presence", fmt.Sprintf(`{"topic":%q,"cursor":%q}`, topic, cursor)), &p)
		for _, e := range p.Clients {
			if clients[e.Client] {
				t.Fatalf("client %s listed twice", e.Client)
			}
			clients[e.Client] = true
			users = append(users, e.User)
		}
		if p.Cursor == "" {
			break
		}
		cursor = p.Cursor
	}
	decodeResult(t, c.Call("presenceStats", fmt.Sprintf(`{"topic":%q}`, topic)), &st)
	slices.Sort(users)
	return users, clients, st
}

// agree waits until every observer's list and stats of topic are those of
// want (user -> connections), and the server API's stats on base agree.
func agree(t *testing.T, topic string, want map[string]int, base string, observers ...*wstest.Conn) {
	t.Helper()
	var wantUsers []string
	for u, n := range want {
		for range n {
			wantUsers = append(wantUsers, u)
		}
	}
	slices.Sort(wantUsers)
	wantStats := presenceStats{Clients: len(wantUsers), Users: len(want)}
	var last string
	testkit.Eventually(t, 30*time.Second, "presence to agree", func() bool {
		for _, c := range observers {
			users, _, st := fleetPresence(t, c, topic)
			if !slices.Equal(users, wantUsers) || st != wantStats {
				last = fmt.Sprintf("listed %v, stats %+v; want %v, %+v", users, st, wantUsers, wantStats)
				return false
			}
		}
		var st presenceStats
		if err := json.Unmarshal(apiOK(t, base, "presenceStats", fmt.Sprintf(`{"topic":%q}`, topic)), &st); err != nil || st != wantStats {
			last = fmt.Sprintf("server API stats %+v (%v), want %+v", st, err, wantStats)
			return false
		}
		return true
	})
	if t.Failed() {
		t.Log(last)
	}
}

// presenceFleet runs 20 clients (10 users, two connections each) over two
// instances started with cfg, then: unsubscribes and closes remove
// entries everywhere; a watcher gets coalesced diffs; kill -9 of one
// instance removes its entries within the ttl (no live instance removes
// them: they expire); a client without the subscribe grant is refused.
func presenceFleet(t *testing.T, cfg string) {
	a, b := start(t, cfg), start(t, cfg)
	watcher := dialUser(t, a, "watcher")
	wstest.MustOK(t, watcher.Call("subscribe", `{"topic":"room:1"}`))
	want := map[string]int{"watcher": 1}
	var onA, onB []*wstest.Conn
	for i := range 20 {
		user := fmt.Sprint("u", i%10)
		p := a
		if i%2 == 1 {
			p = b
		}
		c := dialUser(t, p, user)
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:1"}`))
		want[user]++
		if p == a {
			onA = append(onA, c)
		} else {
			onB = append(onB, c)
		}
	}
	obsA, obsB := dialUser(t, a, "observer"), dialUser(t, b, "observer")
	agree(t, "room:1", want, a.url(""), obsA, obsB)

	// The first join goes out at once, the rest within the next interval
	// or two: fewer notifications than joins. (The watcher's own join may
	// come before its subscribe's answer, which Call skips.)
	joined, notes := map[string]bool{}, 0
	for len(joined) < 20 {
		f := watcher.RecvRaw()
		var n struct {
			Method string
			Params struct {
				Topic         string
				Joins, Leaves []presenceEntry
			}
		}
		if json.Unmarshal(f, &n) != nil || n.Method != "presence" {
			continue
		}
		notes++
		for _, e := range n.Params.Joins {
			if e.User != "watcher" {
				joined[e.Client] = true
			}
		}
	}
	if notes >= 20 {
		t.Errorf("20 joins took %d notifications: not coalesced", notes)
	}

	// Unsubscribes on both instances, and closes on both.
	for _, c := range []*wstest.Conn{onA[0], onB[0]} {
		wstest.MustOK(t, c.Call("unsubscribe", `{"topic":"room:1"}`))
	}
	onA[1].WS.CloseNow()
	onB[1].WS.CloseNow()
	for _, i := range []int{0, 1, 2, 3} { // onA[0], onB[0], onA[1], onB[1] are users u0, u1, u2, u3
		want[fmt.Sprint("u", i)]--
	}
	agree(t, "room:1", want, a.url(""), obsA, obsB)

	// kill -9 of B: nothing removes its entries but their expiry.
	b.kill()
	for i := 2; i < len(onB); i++ {
		user := fmt.Sprint("u", (2*i+1)%10)
		if want[user]--; want[user] == 0 {
			delete(want, user)
		}
	}
	for u, n := range want {
		if n == 0 {
			delete(want, u)
		}
	}
	agree(t, "room:1", want, a.url(""), obsA)

	// Grants: no subscribe grant, no presence.
	for _, m := range []string{"presence", "presenceStats"} {
		f := obsA.Call(m, `{"topic":"secret:1"}`)
		if f.Error == nil || f.Error.Code != -32003 {
			t.Errorf("%s of secret:1: %+v, want -32003", m, f.Error)
		}
	}
	if v := a.metric("presence_entries"); v != float64(1+len(onA)-2) {
		t.Errorf("A presence_entries = %v, want %d", v, 1+len(onA)-2)
	}
	if a.metric("presence_diffs_sent_total") == 0 {
		t.Error("presence_diffs_sent_total is 0")
	}
}

func TestPresenceFleetOnRedis(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	presenceFleet(t, fleetConfig(r.URL(), apiConfig+presenceConfig))
}

func TestPresenceFleetOnRedisCluster(t *testing.T) {
	leakcheck.Check(t)
	cl := redistest.StartCluster(t)
	cfg := fleetConfig(clusterURL(cl), apiConfig+presenceConfig)
	cfg = strings.Replace(cfg, "redis: {url:", "redis: {bus: sharded, partitions: 8, url:", 1)
	presenceFleet(t, cfg)
}

// TestPresenceOnTheMemoryBus: one instance without Redis keeps presence
// in the process: list, stats, unsubscribe, close, grants.
func TestPresenceOnTheMemoryBus(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, apiConfig+presenceConfig)
	want := map[string]int{}
	var conns []*wstest.Conn
	for i := range 20 {
		user := fmt.Sprint("u", i%10)
		c := dialUser(t, p, user)
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:1"}`))
		want[user]++
		conns = append(conns, c)
	}
	obs := dialUser(t, p, "observer")
	agree(t, "room:1", want, p.url(""), obs)
	wstest.MustOK(t, conns[0].Call("unsubscribe", `{"topic":"room:1"}`))
	conns[1].WS.CloseNow()
	want["u0"]--
	want["u1"]--
	agree(t, "room:1", want, p.url(""), obs)
	for _, m := range []string{"presence", "presenceStats"} {
		if f := obs.Call(m, `{"topic":"secret:1"}`); f.Error == nil || f.Error.Code != -32003 {
			t.Errorf("%s of secret:1: %+v, want -32003", m, f.Error)
		}
	}
	if f := obs.Call("presence", `{"topic":"other"}`); f.Error == nil || f.Error.Code != -32602 {
		t.Errorf("presence of a topic without it: %+v, want -32602", f.Error)
	}
}

// TestGoClientPresenceThroughADrain: the Go client lists and counts a
// topic's presence and hears its diffs; a client closed by a drain that
// reconnects to the instance that replaces it shows as one leave (of its
// old id) and one join (of its new one), never more.
func TestGoClientPresenceThroughADrain(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := fleetConfig(r.URL(), apiConfig+presenceConfig+"drain: {duration: 100ms}\n")
	a, b := start(t, cfg), start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	diffs := make(chan client.PresenceDiff, 64)
	wopts := &client.Options{Token: wstest.HS256(apiSecret, "watcher"), OnPresence: func(d client.PresenceDiff) { diffs <- d }}
	w, err := client.Dial(ctx, b.WS(), wopts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Subscribe(ctx, "room:d", func(string, json.RawMessage) {}); err != nil {
		t.Fatal(err)
	}
	xopts := client.DefaultOptions()
	xopts.Token = wstest.HS256(apiSecret, "x")
	xopts.MinBackoff, xopts.MaxBackoff = 50*time.Millisecond, 500*time.Millisecond
	x, err := client.Dial(ctx, a.WS(), xopts)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if _, err := x.Subscribe(ctx, "room:d", func(string, json.RawMessage) {}); err != nil {
		t.Fatal(err)
	}
	xID := func() string {
		es, err := w.PresenceAll(ctx, "room:d")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.User == "x" {
				return e.Client
			}
		}
		return ""
	}
	var oldID string
	testkit.Eventually(t, 30*time.Second, "x present", func() bool { oldID = xID(); return oldID != "" })
	if st, err := w.PresenceStats(ctx, "room:d"); err != nil || st != (client.PresenceStats{Clients: 2, Users: 2}) {
		t.Fatalf("stats %+v, %v", st, err)
	}
	joins, leaves := map[string]int{}, map[string]int{}
	await := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case d := <-diffs:
				for _, e := range d.Joins {
					joins[e.Client]++
				}
				for _, e := range d.Leaves {
					leaves[e.Client]++
				}
			case <-ctx.Done():
				t.Fatalf("%s: joins %v, leaves %v", what, joins, leaves)
			}
		}
	}
	// x's join is announced first (a join and a leave within one
	// interval would cancel out, and the watcher would hear of neither).
	await("x's join", func() bool { return joins[oldID] == 1 })

	// Drain A; a new instance takes its address; x reconnects there.
	addr := a.Addr
	a.signal(syscall.SIGTERM)
	if code := a.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("A exit %d", code)
	}
	startAt(t, addr, cfg).waitReady()
	var newID string
	testkit.Eventually(t, 30*time.Second, "x present again", func() bool {
		newID = xID()
		return newID != "" && newID != oldID
	})

	await("the old id's leave and the new one's join", func() bool { return leaves[oldID] > 0 && joins[newID] > 0 })
	if joins[oldID] > 1 || leaves[oldID] != 1 || joins[newID] != 1 || leaves[newID] != 0 {
		t.Fatalf("through a drain: joins %v, leaves %v (old %s, new %s)", joins, leaves, oldID, newID)
	}
}
