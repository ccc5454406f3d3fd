package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/presence"
)

// roomMode keeps presence in room:* (with diffs in room:live*), nothing
// elsewhere.
func roomMode(topic string) presence.Mode {
	if !strings.HasPrefix(topic, "room:") {
		return presence.Mode{}
	}
	return presence.Mode{Presence: true, JoinLeave: strings.HasPrefix(topic, "room:live")}
}

// startPresenceServer runs an authenticating instance on broker, keeping
// presence in store.
func startPresenceServer(t *testing.T, broker *bus.MemoryBroker, store presence.Store) (*Server, string) {
	t.Helper()
	cfg := handshake.DefaultConfig()
	m := metrics.NewDiscard()
	gate, err := handshake.New(cfg, handshake.Deps{Metrics: m, Tokens: testTokens(t)})
	if err != nil {
		t.Fatal(err)
	}
	checker, err := access.New(access.Config{Namespaces: []access.Namespace{
		{Pattern: "room:secret", Rule: access.Rule{Subscribe: []string{}, Publish: []string{}}},
	}}, access.Deps{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, Deps{Gate: gate, Bus: bus.NewMemory(broker, m), Metrics: m, Access: checker,
		Presence: PresenceOptions{Store: store, Mode: roomMode, Config: presence.Config{DiffInterval: 50 * time.Millisecond}}})
}

type presenceFrame struct {
	Method string
	Params struct {
		Topic  string
		Joins  []presence.Entry
		Leaves []presence.Entry
	}
}

func listOf(t *testing.T, c *wstest.Conn, topic string) []presence.Entry {
	t.Helper()
	f := c.Call("presence", `{"topic":"`+topic+`"}`)
	wstest.MustOK(t, f)
	var p presence.Page
	if err := json.Unmarshal(f.Result, &p); err != nil {
		t.Fatal(err)
	}
	return p.Clients
}

func statsOf(t *testing.T, c *wstest.Conn, topic string) presence.Stats {
	t.Helper()
	f := c.Call("presenceStats", `{"topic":"`+topic+`"}`)
	wstest.MustOK(t, f)
	var st presence.Stats
	if err := json.Unmarshal(f.Result, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func usersOf(es []presence.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.User)
	}
	slices.Sort(out)
	return out
}

// TestPresenceAcrossInstances: two instances on one store see the same
// entries; a subscribe is visible at once to the subscriber itself; an
// unsubscribe, an API unsubscribe and a close remove entries; client ids
// differ between instances.
func TestPresenceAcrossInstances(t *testing.T) {
	leakcheck.Check(t)
	broker, store := bus.NewMemoryBroker(), presence.NewMemoryStore()
	a, urlA := startPresenceServer(t, broker, store)
	_, urlB := startPresenceServer(t, broker, store)
	alice, bob, carol := dialAs(t, urlA, "alice"), dialAs(t, urlB, "bob"), dialAs(t, urlB, "carol")
	for _, c := range []*wstest.Conn{alice, bob, carol} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:1"}`))
	}
	for _, c := range []*wstest.Conn{alice, bob} {
		if got := usersOf(listOf(t, c, "room:1")); fmt.Sprint(got) != "[alice bob carol]" {
			t.Fatalf("listed %v", got)
		}
		if st := statsOf(t, c, "room:1"); st != (presence.Stats{Clients: 3, Users: 3}) {
			t.Fatalf("stats %+v", st)
		}
	}
	ids := map[string]bool{}
	for _, e := range listOf(t, alice, "room:1") {
		ids[strings.SplitN(e.Client, ".", 2)[0]] = true
	}
	if len(ids) != 2 {
		t.Fatalf("client ids name %d instances, want 2: %v", len(ids), ids)
	}

	wstest.MustOK(t, bob.Call("unsubscribe", `{"topic":"room:1"}`))
	if err := a.Unsubscribe("carol", "room:1"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Until(time.Now().Add(10*time.Second)), func() string { return fmt.Sprint("still listed: ", listOf(t, alice, "room:1")) }, func() bool {
		return fmt.Sprint(usersOf(listOf(t, alice, "room:1"))) == "[alice]"
	})
	alice.WS.CloseNow()
	testkit.Eventually(t, time.Until(time.Now().Add(10*time.Second)), func() string { return fmt.Sprint("after close: ", statsOf(t, bob, "room:1")) }, func() bool {
		return statsOf(t, bob, "room:1") == presence.Stats{}
	})
}

// TestPresenceCallsNeedTheSubscribeGrant: -32003 for a topic the client
// may not subscribe to; -32602 for a topic without presence or bad params.
func TestPresenceCallsNeedTheSubscribeGrant(t *testing.T) {
	leakcheck.Check(t)
	_, url := startPresenceServer(t, nil, nil)
	c := dialAs(t, url, "alice")
	for _, tt := range []struct {
		method, params string
		code           int
	}{
		{"presence", `{"topic":"room:secret"}`, -32003},
		{"presenceStats", `{"topic":"room:secret"}`, -32003},
		{"presence", `{"topic":"other"}`, -32602},
		{"presenceStats", `{"topic":"other"}`, -32602},
		{"presence", `{"topic":"__x"}`, -32602},
		{"presence", `{"topic":1}`, -32602},
		{"presenceStats", `[]`, -32602},
		{"presence", `{"topic":"room:1","cursor":"` + strings.Repeat("x", 600) + `"}`, -32602},
	} {
		f := c.Call(tt.method, tt.params)
		if f.Error == nil || f.Error.Code != tt.code {
			t.Errorf("%s %s: %+v, want %d", tt.method, tt.params, f.Error, tt.code)
		}
	}
	if st := statsOf(t, c, "room:1"); st != (presence.Stats{}) {
		t.Fatalf("%+v", st)
	}
}

// TestPresenceDiffsReachSubscribersOfEveryInstance: joins and leaves on
// either instance reach a joinLeave topic's subscribers on both, as
// presence notifications; a topic without joinLeave sends none.
func TestPresenceDiffsReachSubscribersOfEveryInstance(t *testing.T) {
	leakcheck.Check(t)
	broker, store := bus.NewMemoryBroker(), presence.NewMemoryStore()
	_, urlA := startPresenceServer(t, broker, store)
	_, urlB := startPresenceServer(t, broker, store)
	watcher := dialAs(t, urlA, "watcher")
	wstest.MustOK(t, watcher.Call("subscribe", `{"topic":"room:quiet"}`))
	wstest.MustOK(t, watcher.Call("subscribe", `{"topic":"room:live"}`))
	var others []*wstest.Conn
	for i := range 6 {
		url := urlA
		if i%2 == 1 {
			url = urlB
		}
		c := dialAs(t, url, fmt.Sprint("u", i))
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:quiet"}`))
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:live"}`))
		others = append(others, c)
	}
	present := map[string]bool{}
	read := func(until func() bool) {
		for !until() {
			var f presenceFrame
			if err := json.Unmarshal(watcher.RecvRaw(), &f); err != nil || f.Method != "presence" {
				continue
			}
			if f.Params.Topic != "room:live" {
				t.Fatalf("a diff for %s, which has no joinLeave", f.Params.Topic)
			}
			for _, e := range f.Params.Joins {
				present[e.User] = true
			}
			for _, e := range f.Params.Leaves {
				delete(present, e.User)
			}
		}
	}
	read(func() bool {
		for i := range 6 {
			if !present[fmt.Sprint("u", i)] {
				return false
			}
		}
		return true
	})
	for _, c := range others {
		c.WS.CloseNow()
	}
	read(func() bool {
		for i := range 6 {
			if present[fmt.Sprint("u", i)] {
				return false
			}
		}
		return true
	})
}

// TestPresenceServerAPI: Server.Presence and PresenceStats, and
// ErrNoPresence for a topic without presence.
func TestPresenceServerAPI(t *testing.T) {
	leakcheck.Check(t)
	s, url := startPresenceServer(t, nil, nil)
	c := dialAs(t, url, "alice")
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"room:1"}`))
	p, err := s.Presence(context.Background(), "room:1", "")
	if err != nil || len(p.Clients) != 1 || p.Clients[0].User != "alice" || p.Cursor != "" {
		t.Fatalf("%+v %v", p, err)
	}
	if st, err := s.PresenceStats(context.Background(), "room:1"); err != nil || st != (presence.Stats{Clients: 1, Users: 1}) {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := s.PresenceStats(context.Background(), "other"); err != ErrNoPresence {
		t.Fatalf("%v", err)
	}
}

// TestPresenceShowsDisplayNames: a connection's name parameter is its
// display name in presence, on every instance, in the list and in the
// diffs; connections of one user with different names stay one user; a
// name over the limit is cut and one with a control character dropped.
func TestPresenceShowsDisplayNames(t *testing.T) {
	leakcheck.Check(t)
	broker, store := bus.NewMemoryBroker(), presence.NewMemoryStore()
	_, urlA := startPresenceServer(t, broker, store)
	_, urlB := startPresenceServer(t, broker, store)
	as := func(url, user, name string) *wstest.Conn {
		return wstest.Dial(t, url+"?token="+wstest.HS256(testSecret, user)+"&name="+name)
	}
	watcher := as(urlA, "watcher", "")
	wstest.MustOK(t, watcher.Call("subscribe", `{"topic":"room:live-names"}`))
	long := strings.Repeat("n", handshake.MaxNameLen+10)
	for _, name := range []string{"Alice%20A.", "bob", long, "bad%0Aname"} {
		wstest.MustOK(t, as(urlB, "guest", name).Call("subscribe", `{"topic":"room:live-names"}`))
	}
	wstest.MustOK(t, as(urlB, "carol", "Carol").Call("subscribe", `{"topic":"room:live-names"}`))
	names := func(es []presence.Entry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.User+"/"+e.Name)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	others := "carol/Carol,guest/,guest/Alice A.,guest/bob,guest/" + long[:handshake.MaxNameLen]
	// The diffs first: the calls below skip the notifications they meet.
	var joined []presence.Entry
	for len(joined) < 5 {
		var f presenceFrame
		if err := json.Unmarshal(watcher.RecvRaw(), &f); err == nil && f.Method == "presence" {
			for _, e := range f.Params.Joins {
				if e.User != "watcher" { // its own join may come, or may have passed during its subscribe
					joined = append(joined, e)
				}
			}
		}
	}
	if got := names(joined); got != others {
		t.Fatalf("diffs joined %s, want %s", got, others)
	}
	if got, want := names(listOf(t, watcher, "room:live-names")), others+",watcher/"; got != want {
		t.Fatalf("listed %s, want %s", got, want)
	}
	if st := statsOf(t, watcher, "room:live-names"); st != (presence.Stats{Clients: 6, Users: 3}) {
		t.Fatalf("stats %+v, want 6 clients of 3 users", st)
	}
}
