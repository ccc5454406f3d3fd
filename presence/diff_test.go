package presence

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestCoalescerProperties drives the coalescer with random joins and
// leaves from several instances at random times, firing timers as the
// tracker would, and checks what subscribers see:
//   - a topic's diffs are at least an interval apart, and at most max long;
//   - no client is in one diff twice, and across all diffs a client joins
//     at most once and leaves at most once (a client closed by a drain that
//     reconnects is a leave of its old id and a join of its new one);
//   - once everything is sent, applying the diffs in order to an empty room
//     gives exactly who is in it;
//   - what goes to the other instances is exactly this instance's own part.
func TestCoalescerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const interval = time.Second
		maxDiff := rapid.IntRange(1, 5).Draw(t, "max")
		c := newCoalescer(interval, maxDiff)
		topics := []string{"a", "b"}
		now := time.Duration(0)
		due := map[string]time.Duration{} // armed timers
		lastSent := map[string]time.Duration{}
		room := map[string]map[string]bool{"a": {}, "b": {}} // truth
		seen := map[string]map[string]bool{"a": {}, "b": {}} // as subscribers rebuilt it
		joined, left := map[string]int{}, map[string]int{}
		ever := map[string]bool{} // client ids ever used: ids are never reused
		next := 0

		fire := func(topic string) {
			all, own, again := c.take(topic)
			delete(due, topic)
			if again {
				due[topic] = now + interval
			}
			if all.empty() {
				if !own.empty() {
					t.Fatalf("own part %v of an empty diff", own)
				}
				return
			}
			if last, ok := lastSent[topic]; ok && now-last < interval {
				t.Fatalf("topic %s: diffs %v apart", topic, now-last)
			}
			lastSent[topic] = now
			if n := len(all.Joins) + len(all.Leaves); n > maxDiff {
				t.Fatalf("diff of %d entries, max %d", n, maxDiff)
			}
			inDiff := map[string]bool{}
			for _, e := range all.Joins {
				if inDiff[e.Client] {
					t.Fatalf("client %s twice in one diff", e.Client)
				}
				inDiff[e.Client] = true
				joined[e.Client]++
				seen[topic][e.Client] = true
			}
			for _, e := range all.Leaves {
				if inDiff[e.Client] {
					t.Fatalf("client %s twice in one diff", e.Client)
				}
				inDiff[e.Client] = true
				left[e.Client]++
				delete(seen[topic], e.Client)
			}
			for _, e := range append(own.Joins, own.Leaves...) {
				if !inDiff[e.Client] || e.Client[0] != 'o' {
					t.Fatalf("own part holds %s", e.Client)
				}
			}
		}
		advance := func(d time.Duration) {
			target := now + d
			for {
				var first string
				for topic, at := range due {
					if at <= target && (first == "" || at < due[first]) {
						first = topic
					}
				}
				if first == "" {
					break
				}
				now = max(now, due[first])
				fire(first)
			}
			now = target
		}

		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			topic := rapid.SampledFrom(topics).Draw(t, "topic")
			own := rapid.Bool().Draw(t, "own")
			prefix := "r"
			if own {
				prefix = "o"
			}
			var changes []Change
			if len(room[topic]) > 0 && rapid.Bool().Draw(t, "leave") {
				// A leave of someone present (of the right origin, when
				// there is one).
				for id := range room[topic] {
					if id[0] == prefix[0] {
						changes = append(changes, Change{Topic: topic, Entry: Entry{Client: id}, Leave: true})
						delete(room[topic], id)
						break
					}
				}
			} else {
				id := fmt.Sprintf("%s%d", prefix, next)
				next++
				ever[id] = true
				room[topic][id] = true
				changes = append(changes, Change{Topic: topic, Entry: Entry{Client: id}})
			}
			if len(changes) > 0 && c.add(topic, changes, own) {
				due[topic] = now // fire at once
			}
			advance(time.Duration(rapid.IntRange(0, 1500).Draw(t, "ms")) * time.Millisecond)
		}
		advance(time.Hour) // every timer fires until none is armed
		if len(due) != 0 || len(c.topics) != 0 {
			t.Fatalf("still armed: %v, pending topics %d", due, len(c.topics))
		}
		for _, topic := range topics {
			if len(seen[topic]) != len(room[topic]) {
				t.Fatalf("topic %s: subscribers see %v, room is %v", topic, seen[topic], room[topic])
			}
			for id := range room[topic] {
				if !seen[topic][id] {
					t.Fatalf("topic %s: %s is in the room but was never announced", topic, id)
				}
			}
		}
		for id := range ever {
			if joined[id] > 1 || left[id] > 1 {
				t.Fatalf("client %s joined %d and left %d times", id, joined[id], left[id])
			}
		}
	})
}

func TestKey(t *testing.T) {
	for _, tt := range []struct {
		give  string
		topic string
		ok    bool
	}{
		{Key("room:1"), "room:1", true},
		{"__user:bob", "", false},
		{Key("__secret"), "", false},
		{Key(""), "", false},
		{Key("bad topic"), "", false},
	} {
		topic, ok := TopicOfKey(tt.give)
		if ok != tt.ok || (ok && topic != tt.topic) {
			t.Errorf("TopicOfKey(%q) = %q, %v", tt.give, topic, ok)
		}
	}
}

// A display name travels with its entry: in the diff subscribers get and
// in the part sent to the other instances, and an entry without one says
// nothing of names.
func TestDiffsCarryDisplayNames(t *testing.T) {
	c := newCoalescer(time.Second, MaxDiff)
	c.add("room", []Change{
		{Topic: "room", Entry: Entry{Client: "i.1", Name: "alice"}},
		{Topic: "room", Entry: Entry{Client: "i.2", User: "bob"}},
	}, true)
	all, own, _ := c.take("room")
	want := []Entry{{Client: "i.1", Name: "alice"}, {Client: "i.2", User: "bob"}}
	if !slices.Equal(all.Joins, want) || !slices.Equal(own.Joins, want) {
		t.Fatalf("joins %+v, own %+v; want %+v", all.Joins, own.Joins, want)
	}
	const note = `{"jsonrpc":"2.0","method":"presence","params":{"topic":"room","joins":[{"client":"i.1","user":"","name":"alice"},{"client":"i.2","user":"bob"}],"leaves":[]}}`
	if got := string(appendNotification(nil, "room", all)); got != note {
		t.Fatalf("notification\n%s\nwant\n%s", got, note)
	}
}
