package presence

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// stores runs f against every store: memory, Redis, and a 3-node Redis
// Cluster.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { f(t, NewMemoryStore()) })
	t.Run("redis", func(t *testing.T) { f(t, newRedisStore(t, storeOptions{})) })
	t.Run("cluster", func(t *testing.T) { f(t, newClusterStore(t, storeOptions{})) })
}

func newRedisStore(t testing.TB, opts storeOptions) *RedisStore {
	return storeOn(t, redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr}), opts)
}

func newClusterStore(t testing.TB, opts storeOptions) *RedisStore {
	return storeOn(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t).Addrs}), opts)
}

// storeOptions is what a test's Redis store is built from: its TTL
// (presence.ttl) and its dependencies.
type storeOptions struct {
	Client        redis.UniversalClient
	ChannelPrefix string
	Partitions    int
	TTL           time.Duration
	Expired       func(topic string, gone []Entry)
}

func (o storeOptions) build() (*RedisStore, error) {
	return NewRedisStore(Config{TTL: o.TTL}, RedisDeps{Client: o.Client, ChannelPrefix: o.ChannelPrefix, Partitions: o.Partitions, Expired: o.Expired})
}

// mustTracker is NewTracker, which must succeed.
func mustTracker(cfg Config, deps TrackerDeps) *Tracker { return testkit.Must(NewTracker(cfg, deps)) }

// storeOn builds a Redis store on c, closed when the test ends.
func storeOn(t testing.TB, c redis.UniversalClient, opts storeOptions) *RedisStore {
	t.Cleanup(func() { c.Close() })
	opts.Client = c
	s, err := opts.build()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func join(topic, client, user string) Change {
	return Change{Topic: topic, Entry: Entry{Client: client, User: user}}
}

func leave(topic, client, user string) Change {
	return Change{Topic: topic, Entry: Entry{Client: client, User: user}, Leave: true}
}

func mustApply(t testing.TB, s Store, cs ...Change) {
	t.Helper()
	if err := s.Apply(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
}

func mustStats(t testing.TB, s Store, topic string) Stats {
	t.Helper()
	st, err := s.Stats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// all pages through topic with pages of limit.
func all(t testing.TB, s Store, topic string, limit int) (es []Entry, pages int) {
	t.Helper()
	cursor := ""
	for {
		p, err := s.Page(context.Background(), topic, cursor, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Clients) > limit {
			t.Fatalf("page of %d entries, limit %d", len(p.Clients), limit)
		}
		es = append(es, p.Clients...)
		pages++
		if p.Cursor == "" {
			return es, pages
		}
		cursor = p.Cursor
	}
}

func TestStoreCountsAndPages(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		// Several topics in one write, users with several connections, an
		// anonymous connection, a user that is not ASCII.
		var cs []Change
		var want []Entry
		for i := range 25 {
			e := Entry{Client: fmt.Sprintf("inst.%d", i), User: fmt.Sprintf("u%d", i%10)}
			switch i {
			case 3:
				e.User = ""
			case 13:
				e.User = "zoë \"quoted\""
			}
			cs = append(cs, Change{Topic: "room:1", Entry: e})
			want = append(want, e)
		}
		cs = append(cs, join("room:2", "other.1", "a"))
		mustApply(t, s, cs...)
		// Joining twice changes nothing.
		mustApply(t, s, cs[:5]...)

		st := mustStats(t, s, "room:1")
		users := map[string]bool{}
		for _, e := range want {
			users[e.User] = true
		}
		if st.Clients != 25 || st.Users != int64(len(users)) {
			t.Fatalf("stats %+v, want 25 clients, %d users", st, len(users))
		}
		got, pages := all(t, s, "room:1", 10)
		slices.SortFunc(want, func(a, b Entry) int { return cmpString(a.Client, b.Client) })
		if !slices.Equal(got, want) || pages != 3 {
			t.Fatalf("paged %d pages:\n got %v\nwant %v", pages, got, want)
		}

		// Leaves, one of them twice, one of an unknown client.
		mustApply(t, s, leave("room:1", "inst.0", "u0"), leave("room:1", "inst.10", "u0"), leave("room:1", "inst.20", "u0"),
			leave("room:1", "inst.0", "u0"), leave("room:1", "nobody.1", "x"))
		st = mustStats(t, s, "room:1")
		if st.Clients != 22 || st.Users != int64(len(users)-1) {
			t.Fatalf("after leaves: %+v (u0 had three connections, all gone)", st)
		}
		if st := mustStats(t, s, "room:2"); st.Clients != 1 || st.Users != 1 {
			t.Fatalf("room:2: %+v", st)
		}
		if st := mustStats(t, s, "room:none"); st != (Stats{}) {
			t.Fatalf("empty topic: %+v", st)
		}
		p, err := s.Page(context.Background(), "room:none", "", 0)
		if err != nil || len(p.Clients) != 0 || p.Cursor != "" || p.Clients == nil {
			t.Fatalf("empty topic page: %#v, %v", p, err)
		}
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestRedisEntriesOfADeadInstanceExpire: an instance that stops refreshing
// (it died) leaves entries that no reader sees past the ttl, with counts
// corrected, although no live instance noticed: the readers' own scripts
// clean up, and the Expired hook hears of each gone entry exactly once.
func TestRedisEntriesOfADeadInstanceExpire(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprint("cluster=", cluster), func(t *testing.T) {
			var mu sync.Mutex
			gone := map[string]int{}
			opts := storeOptions{TTL: 300 * time.Millisecond, Expired: func(topic string, es []Entry) {
				mu.Lock()
				defer mu.Unlock()
				for _, e := range es {
					gone[topic+" "+e.Client]++
				}
			}}
			var dead *RedisStore
			if cluster {
				dead = newClusterStore(t, opts)
			} else {
				dead = newRedisStore(t, opts)
			}
			// The live instance: the same Redis, a ttl it will not outlive
			// in this test (so no refresh loop is needed).
			liveOpts := opts
			liveOpts.Client, liveOpts.TTL = dead.client, time.Hour
			live, err := liveOpts.build()
			if err != nil {
				t.Fatal(err)
			}
			// The dead instance: 2,500 entries (more than one cleanup
			// batch) that are never refreshed.
			var cs []Change
			for i := range 2500 {
				cs = append(cs, join("room:big", fmt.Sprintf("dead.%d", i), fmt.Sprintf("u%d", i%7)))
			}
			mustApply(t, dead, cs...)
			mustApply(t, live, join("room:big", "live.1", "alice"))

			deadline := time.Now().Add(30 * time.Second)
			for {
				st := mustStats(t, live, "room:big")
				if st == (Stats{Clients: 1, Users: 1}) {
					break
				}
				if st.Clients < 1 {
					t.Fatalf("the live entry is gone too: %+v", st)
				}
				if time.Now().After(deadline) {
					t.Fatalf("dead entries still counted: %+v", st)
				}
				time.Sleep(20 * time.Millisecond) // expiry runs on Redis's clock
			}
			es, _ := all(t, live, "room:big", 1000)
			if len(es) != 1 || es[0].Client != "live.1" {
				t.Fatalf("listed %v", es)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(gone) != 2500 {
				t.Fatalf("Expired heard of %d entries, want 2500", len(gone))
			}
			for k, n := range gone {
				if n != 1 {
					t.Fatalf("Expired heard of %s %d times", k, n)
				}
			}
		})
	}
}

// TestRedisKeysShareTheTopicsSlot: every key of a topic carries the hash
// tag of the topic's bus partition (so scripts work on a Cluster, where a
// cross-slot script fails), and the keys vanish with their last entry.
func TestRedisKeysShareTheTopicsSlot(t *testing.T) {
	s := newRedisStore(t, storeOptions{ChannelPrefix: "t1:", Partitions: 8})
	mustApply(t, s, join("room:1", "a.1", "alice"))
	keys, err := s.client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := s.keys("room:1")
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	for _, k := range keys {
		ttl := s.client.PTTL(context.Background(), k).Val()
		if ttl <= 0 || ttl > DefaultTTL {
			t.Fatalf("key %s has ttl %v", k, ttl)
		}
	}
	mustApply(t, s, leave("room:1", "a.1", "alice"))
	if n := s.client.DBSize(context.Background()).Val(); n != 0 {
		t.Fatalf("%d keys left after the last leave", n)
	}
}

// TestRedisStoreSurvivesAScriptCacheFlush: a Redis restart empties the
// script cache; writes fall back to EVAL.
func TestRedisStoreSurvivesAScriptCacheFlush(t *testing.T) {
	s := newRedisStore(t, storeOptions{})
	mustApply(t, s, join("room:1", "a.1", "alice"))
	if err := s.client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, join("room:1", "a.2", "bob"))
	if st := mustStats(t, s, "room:1"); st.Clients != 2 {
		t.Fatalf("%+v", st)
	}
}

// TestStoreAppliesChangesInOrder: a connection that subscribes,
// unsubscribes and subscribes again within one write is present, and one
// that leaves last is not.
func TestStoreAppliesChangesInOrder(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		mustApply(t, s, join("r", "a.1", "u"), leave("r", "a.1", "u"), join("r", "a.1", "u"),
			join("r", "a.2", "v"), leave("r", "a.2", "v"))
		es, _ := all(t, s, "r", 10)
		if len(es) != 1 || es[0].Client != "a.1" {
			t.Fatalf("listed %v", es)
		}
		if st := mustStats(t, s, "r"); st != (Stats{Clients: 1, Users: 1}) {
			t.Fatalf("%+v", st)
		}
	})
}

// Display names are listed with their entries and count no user of their
// own: two anonymous connections with names are one user, ""; a named
// entry leaves as any other, and pages split it nowhere.
func TestStoreKeepsDisplayNames(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		named := []Entry{
			{Client: "i.1", Name: "alice"},
			{Client: "i.2", Name: "bob \"b\" zoë"},
			{Client: "i.3", User: "carol", Name: "Carol C."},
			{Client: "i.4", User: "carol"},
			{Client: "i.5"},
		}
		var cs []Change
		for _, e := range named {
			cs = append(cs, Change{Topic: "room:n", Entry: e})
		}
		mustApply(t, s, cs...)
		if st := mustStats(t, s, "room:n"); st != (Stats{Clients: 5, Users: 2}) {
			t.Fatalf("stats %+v, want 5 clients of 2 users (anonymous and carol)", st)
		}
		for _, limit := range []int{1, 2, 10} {
			if got, _ := all(t, s, "room:n", limit); !slices.Equal(got, named) {
				t.Fatalf("pages of %d: %+v, want %+v", limit, got, named)
			}
		}
		mustApply(t, s, Change{Topic: "room:n", Entry: named[0], Leave: true}, Change{Topic: "room:n", Entry: named[2], Leave: true})
		if st := mustStats(t, s, "room:n"); st != (Stats{Clients: 3, Users: 2}) {
			t.Fatalf("after two leaves: %+v, want 3 clients of 2 users", st)
		}
		if got, _ := all(t, s, "room:n", 10); !slices.Equal(got, []Entry{named[1], named[3], named[4]}) {
			t.Fatalf("after two leaves: %+v", got)
		}
	})
}
