package publishrate

import (
	"maps"
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// The merge is the hot part of the background work: with 100 siblings of
// top-20 slices, rebuilding maps keyed by topic and user on every arrival
// costs far more than its 100 µs budget (BENCHMARKS.md). So keys are interned
// once, when a slice arrives, into dense ids with reference counts; a merge
// then only sums into fresh dense arrays and scans them for the top-N. The
// key -> id maps that readers use are immutable snapshots, cloned only when
// the set of keys changed (a memory copy, not a rehash).
//
// A view's index and value arrays are built together under the merge lock,
// so each view is consistent on its own even though ids are reused.

// remote is the latest accepted envelope of one sibling.
type remote struct {
	ts      int64     // sender's clock: ordering only
	arrived time.Time // receiver's clock: freshness
	slice   []wireTopic
	users   []wireUser
	subs    []wireSub

	tids, sids, uids []int32 // interned ids of slice, subs and users
}

// topicAgg is one topic summed across contributing instances.
type topicAgg struct {
	msgs, bytes float64
	n           int // contributing instances (slice entries, not subs)
	subs        int
}

// view is an immutable merged picture, published by an atomic pointer swap
// and read without locks. Never modify one.
type view struct {
	tindex   map[string]int32 // topic -> index into tvals: every topic in any fresh slice or subs, own included
	tvals    []topicAgg
	uindex   map[string]int32 // user -> index into uvals
	uvals    []float64
	top      []Entry // merged top-N topics, descending
	siblings int     // fresh siblings, empty or not
}

var emptyView = &view{}

func (v *view) rateOf(topic string) float64 {
	if id, ok := v.tindex[topic]; ok {
		return v.tvals[id].msgs
	}
	return 0
}

func (v *view) subscribersOf(topic string) int {
	if id, ok := v.tindex[topic]; ok {
		return v.tvals[id].subs
	}
	return 0
}

func (v *view) rateOfUser(user string) float64 {
	if id, ok := v.uindex[user]; ok {
		return v.uvals[id]
	}
	return 0
}

// interner maps keys to dense ids, counting references; an id is free for
// reuse once its last reference is released.
type interner struct {
	ids   map[string]int32
	names []string // by id; "" when free
	refs  []int32
	free  []int32
	snap  map[string]int32 // immutable copy of ids for views; nil after a change
}

func (in *interner) acquire(k string) int32 {
	if id, ok := in.ids[k]; ok {
		in.refs[id]++
		return id
	}
	if in.ids == nil {
		in.ids = map[string]int32{}
	}
	var id int32
	if n := len(in.free); n > 0 {
		id, in.free = in.free[n-1], in.free[:n-1]
		in.names[id], in.refs[id] = k, 1
	} else {
		id = int32(len(in.names))
		in.names = append(in.names, k)
		in.refs = append(in.refs, 1)
	}
	in.ids[k] = id
	in.snap = nil
	return id
}

func (in *interner) release(ids []int32) {
	for _, id := range ids {
		if in.refs[id]--; in.refs[id] == 0 {
			delete(in.ids, in.names[id])
			in.names[id] = ""
			in.free = append(in.free, id)
			in.snap = nil
		}
	}
}

// index returns the immutable key -> id map for a view.
func (in *interner) index() map[string]int32 {
	if in.snap == nil {
		in.snap = maps.Clone(in.ids)
	}
	return in.snap
}

// merger holds every contribution (own and siblings') with interned keys.
// Not safe for concurrent use: the Aggregator's merge lock guards it.
type merger struct {
	topics, users interner

	local   *pressure.Snapshot
	ltids   []int32
	luids   []int32
	lsubs   []SubjectCount
	lsids   []int32
	remotes map[string]*remote
}

func newMerger() *merger { return &merger{remotes: map[string]*remote{}} }

// setLocal makes s this instance's own contribution.
func (m *merger) setLocal(s *pressure.Snapshot) {
	old, oldU := m.ltids, m.luids
	m.ltids, m.luids = nil, nil
	if s != nil {
		m.ltids = make([]int32, len(s.TopTopics))
		for i, t := range s.TopTopics {
			m.ltids[i] = m.topics.acquire(t.Topic)
		}
		m.luids = make([]int32, len(s.TopUsers))
		for i, u := range s.TopUsers {
			m.luids[i] = m.users.acquire(u.User)
		}
	}
	m.topics.release(old)
	m.users.release(oldU)
	m.local = s
}

// setLocalSubs makes subs (entries with a positive count) this instance's
// own subscriber counts.
func (m *merger) setLocalSubs(subs []SubjectCount) {
	old := m.lsids
	m.lsubs, m.lsids = nil, nil
	for _, s := range subs {
		if s.Count > 0 {
			m.lsubs = append(m.lsubs, s)
			m.lsids = append(m.lsids, m.topics.acquire(s.Topic))
		}
	}
	m.topics.release(old)
}

// put makes r the contribution of sibling id, replacing any earlier one.
func (m *merger) put(id string, r *remote) {
	r.tids = make([]int32, len(r.slice))
	for i, t := range r.slice {
		r.tids[i] = m.topics.acquire(t.Topic)
	}
	r.sids = make([]int32, len(r.subs))
	for i, s := range r.subs {
		r.sids[i] = m.topics.acquire(s.Topic)
	}
	r.uids = make([]int32, len(r.users))
	for i, u := range r.users {
		r.uids[i] = m.users.acquire(u.User)
	}
	if old := m.remotes[id]; old != nil {
		m.release(old)
	}
	m.remotes[id] = r
}

// drop forgets sibling id.
func (m *merger) drop(id string) {
	if r := m.remotes[id]; r != nil {
		m.release(r)
		delete(m.remotes, id)
	}
}

func (m *merger) release(r *remote) {
	m.topics.release(r.tids)
	m.topics.release(r.sids)
	m.users.release(r.uids)
}

// build sums every contribution into a new view with the top n topics.
func (m *merger) build(n int) *view {
	v := &view{
		tindex:   m.topics.index(),
		tvals:    make([]topicAgg, len(m.topics.names)),
		uindex:   m.users.index(),
		uvals:    make([]float64, len(m.users.names)),
		siblings: len(m.remotes),
	}
	if s := m.local; s != nil {
		for i, t := range s.TopTopics {
			a := &v.tvals[m.ltids[i]]
			a.msgs += t.MessagesPerSec
			a.bytes += t.BytesPerSec
			a.n++
		}
		for i, u := range s.TopUsers {
			v.uvals[m.luids[i]] += u.MessagesPerSec
		}
	}
	for i, s := range m.lsubs {
		v.tvals[m.lsids[i]].subs += s.Count
	}
	for _, r := range m.remotes {
		for i, t := range r.slice {
			a := &v.tvals[r.tids[i]]
			a.msgs += t.MessagesPerSec
			a.bytes += t.BytesPerSec
			a.n++
		}
		for i, s := range r.subs {
			v.tvals[r.sids[i]].subs += s.Count
		}
		for i, u := range r.users {
			v.uvals[r.uids[i]] += u.MessagesPerSec
		}
	}
	v.top = topEntries(v.tvals, m.topics.names, n)
	return v
}

// topEntries keeps the n largest topics by (messages/s desc, bytes/s desc,
// topic asc) with a bounded insertion: most candidates lose against the
// current n-th at the first comparison, so this is O(topics) in practice.
// Topics carried only by subs (no slice entry) are not publishers.
func topEntries(vals []topicAgg, names []string, n int) []Entry {
	top := make([]Entry, 0, n)
	for id := range vals {
		a := &vals[id]
		if a.n == 0 {
			continue
		}
		if len(top) == n && !before(a.msgs, a.bytes, names[id], &top[n-1]) {
			continue
		}
		e := Entry{Topic: names[id], MessagesPerSec: a.msgs, BytesPerSec: a.bytes, ContributingInstances: a.n}
		if len(top) == n {
			top = top[:n-1]
		}
		i := len(top)
		top = append(top, e)
		for ; i > 0 && before(e.MessagesPerSec, e.BytesPerSec, e.Topic, &top[i-1]); i-- {
			top[i] = top[i-1]
		}
		top[i] = e
	}
	return top
}

func before(msgs, bytes float64, topic string, b *Entry) bool {
	if msgs != b.MessagesPerSec {
		return msgs > b.MessagesPerSec
	}
	if bytes != b.BytesPerSec {
		return bytes > b.BytesPerSec
	}
	return topic < b.Topic
}
