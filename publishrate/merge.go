package publishrate

import (
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// remote is the latest accepted envelope of one sibling.
type remote struct {
	ts      int64     // sender's clock: ordering only
	arrived time.Time // receiver's clock: freshness
	slice   []wireTopic
	users   []wireUser
	subs    []wireSub
}

// topicAgg is one topic summed across contributing instances.
type topicAgg struct {
	msgs, bytes float64
	n           int
}

// view is an immutable merged picture: built by mergeView, published by
// an atomic pointer swap, read without locks. Never modify one.
type view struct {
	topics   map[string]topicAgg // every topic in any fresh slice, own included
	users    map[string]float64  // every user in any fresh users list, own included
	subs     map[string]int      // fresh remote subs, plus the local list unless LocalSubscribers is set
	top      []Entry             // merged top-N topics by messages/s, descending
	siblings int                 // fresh siblings, empty or not
}

var emptyView = &view{}

// mergeView sums local's rates, the local subscriber list and every
// remote's slice, users and subs. remotes must already be the fresh ones.
// Allocations are the view's own maps and its top-N slice.
func mergeView(local *pressure.Snapshot, localSubs []SubjectCount, remotes []*remote, topN int) *view {
	nt, nu, ns := 0, 0, len(localSubs)
	if local != nil {
		nt, nu = len(local.TopTopics), len(local.TopUsers)
	}
	for _, r := range remotes {
		nt += len(r.slice)
		nu += len(r.users)
		ns += len(r.subs)
	}
	v := &view{
		topics:   make(map[string]topicAgg, nt),
		users:    make(map[string]float64, nu),
		subs:     make(map[string]int, ns),
		siblings: len(remotes),
	}
	if local != nil {
		for _, t := range local.TopTopics {
			a := v.topics[t.Topic]
			v.topics[t.Topic] = topicAgg{a.msgs + t.MessagesPerSec, a.bytes + t.BytesPerSec, a.n + 1}
		}
		for _, u := range local.TopUsers {
			v.users[u.User] += u.MessagesPerSec
		}
	}
	for _, s := range localSubs {
		if s.Count > 0 {
			v.subs[s.Topic] += s.Count
		}
	}
	for _, r := range remotes {
		for _, t := range r.slice {
			a := v.topics[t.Topic]
			v.topics[t.Topic] = topicAgg{a.msgs + t.MessagesPerSec, a.bytes + t.BytesPerSec, a.n + 1}
		}
		for _, u := range r.users {
			v.users[u.User] += u.MessagesPerSec
		}
		for _, s := range r.subs {
			v.subs[s.Topic] += s.Count
		}
	}
	v.top = topEntries(v.topics, topN)
	return v
}

// topEntries keeps the n largest topics by (messages/s desc, bytes/s desc,
// topic asc) with a bounded insertion: most candidates lose against the
// current n-th at the first comparison, so this is O(topics) in practice.
func topEntries(topics map[string]topicAgg, n int) []Entry {
	top := make([]Entry, 0, min(n, len(topics)))
	for k, a := range topics {
		e := Entry{Topic: k, MessagesPerSec: a.msgs, BytesPerSec: a.bytes, ContributingInstances: a.n}
		if len(top) == n {
			if !entryBefore(&e, &top[n-1]) {
				continue
			}
			top = top[:n-1]
		}
		i := len(top)
		top = append(top, e)
		for ; i > 0 && entryBefore(&e, &top[i-1]); i-- {
			top[i] = top[i-1]
		}
		top[i] = e
	}
	return top
}

func entryBefore(a, b *Entry) bool {
	if a.MessagesPerSec != b.MessagesPerSec {
		return a.MessagesPerSec > b.MessagesPerSec
	}
	if a.BytesPerSec != b.BytesPerSec {
		return a.BytesPerSec > b.BytesPerSec
	}
	return a.Topic < b.Topic
}
