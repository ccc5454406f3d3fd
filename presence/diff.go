package presence

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/rtserver/rtserver/protocol"
)

// Diff is a topic's coalesced joins and leaves: the params of the presence
// notification (docs/presence.md) without the topic, and what instances
// send each other.
type Diff struct {
	Joins  []Entry `json:"joins"`
	Leaves []Entry `json:"leaves"`
}

func (d Diff) empty() bool { return len(d.Joins) == 0 && len(d.Leaves) == 0 }

// MaxDiff is the most joins and leaves one notification carries; the rest
// waits for the next interval, so a mass reconnect of a huge room never
// queues one enormous frame to every subscriber.
const MaxDiff = 1000

// keyPrefix starts the bus control key of a topic's diffs.
const keyPrefix = "__presence:"

// Key is the bus control key that carries topic's diffs between
// instances. It is reserved (it starts with "__"): no client can
// subscribe to it.
func Key(topic string) string { return keyPrefix + topic }

// TopicOfKey is the topic of a Key, and whether key is one.
func TopicOfKey(key string) (string, bool) {
	t, ok := strings.CutPrefix(key, keyPrefix)
	return t, ok && protocol.ValidTopic(t) && !protocol.Reserved(t)
}

// appendNotification appends the presence notification of d on topic.
func appendNotification(b []byte, topic string, d Diff) []byte {
	if d.Joins == nil {
		d.Joins = []Entry{}
	}
	if d.Leaves == nil {
		d.Leaves = []Entry{}
	}
	params := struct {
		Topic string `json:"topic"`
		Diff
	}{topic, d}
	p, _ := json.Marshal(params) // strings and slices only: cannot fail
	b = append(b, `{"jsonrpc":"2.0","method":"`+protocol.MethodPresence+`","params":`...)
	b = append(b, p...)
	return append(b, '}')
}

// pending is one client's change not yet sent.
type pending struct {
	user  string
	name  string
	leave bool
	own   bool // this instance's own change: it goes to the other instances too
}

// topicDiff is a topic's changes not yet sent. It exists exactly while
// the topic's timer is armed.
type topicDiff struct {
	changes map[string]pending // by client
}

// coalescer merges joins and leaves per topic and lets a topic's diff out
// at most once per interval. It does no timing itself: add says when to
// arm a topic's timer, take (when it fires) says whether to arm it again.
// A topic's first change after a quiet interval goes out at once.
type coalescer struct {
	interval time.Duration
	max      int
	topics   map[string]*topicDiff
}

func newCoalescer(interval time.Duration, max int) coalescer {
	return coalescer{interval: interval, max: max, topics: map[string]*topicDiff{}}
}

// add merges changes (of this instance when own) into topic's pending
// diff. A change that undoes a pending one (a leave after an unsent join,
// or the reverse) cancels both: subscribers never hear of either. It
// reports whether the caller must arm topic's timer, to fire at once.
func (c *coalescer) add(topic string, changes []Change, own bool) (arm bool) {
	d := c.topics[topic]
	if d == nil {
		d = &topicDiff{changes: map[string]pending{}}
		c.topics[topic] = d
		arm = true
	}
	for _, ch := range changes {
		if p, ok := d.changes[ch.Client]; ok && p.leave != ch.Leave {
			delete(d.changes, ch.Client)
			continue
		}
		d.changes[ch.Client] = pending{user: ch.User, name: ch.Name, leave: ch.Leave, own: own}
	}
	return arm
}

// take removes up to max of topic's pending changes, in client order, as
// the diff for its subscribers and the part of it this instance must send
// to the others. again: arm the timer to fire after the interval (a diff
// was taken, so the next one must wait); false when nothing was pending,
// and the topic is forgotten.
func (c *coalescer) take(topic string) (all, own Diff, again bool) {
	d := c.topics[topic]
	if d == nil {
		return all, own, false
	}
	if len(d.changes) == 0 {
		delete(c.topics, topic)
		return all, own, false
	}
	clients := make([]string, 0, len(d.changes))
	for id := range d.changes {
		clients = append(clients, id)
	}
	slices.SortFunc(clients, strings.Compare)
	if len(clients) > c.max {
		clients = clients[:c.max]
	}
	for _, id := range clients {
		p := d.changes[id]
		delete(d.changes, id)
		e := Entry{Client: id, User: p.user, Name: p.name}
		if p.leave {
			all.Leaves = append(all.Leaves, e)
		} else {
			all.Joins = append(all.Joins, e)
		}
		if p.own && p.leave {
			own.Leaves = append(own.Leaves, e)
		} else if p.own {
			own.Joins = append(own.Joins, e)
		}
	}
	return all, own, true
}

// changesOf turns a received diff into changes.
func changesOf(topic string, d Diff) []Change {
	out := make([]Change, 0, len(d.Joins)+len(d.Leaves))
	for _, e := range d.Joins {
		out = append(out, Change{Topic: topic, Entry: e})
	}
	for _, e := range d.Leaves {
		out = append(out, Change{Topic: topic, Entry: e, Leave: true})
	}
	return out
}
