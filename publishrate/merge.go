package publishrate

import (
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// The merge is incremental: a contribution that changes (an envelope
// received, a sibling dropped, a local sample) subtracts its previous
// lists from running sums and adds its new ones, so its cost is the size of
// the lists involved, whatever the number of siblings held. Nothing on that
// path is sized by the fleet.
//
// Each topic and each user is a key: running sums the merge writes under
// its lock, and published copies (atomics) that lookups read without one.
// Lookups find keys through a table of their own (see table) that the merge
// extends in place, so a lookup is one hash, a short probe and one atomic
// load, with no allocation and no copy of anything per merge.
//
// The merged top-N is a tournament tree over dense topic ids (see rank):
// a changed topic re-plays its path, O(log topics), and the top-N is read
// off the tree best-first, O(N log topics).
//
// Running sums of floats drift by rounding when values are subtracted, so
// a sum resets to exactly 0 when its last contribution leaves, and resum,
// run once per broadcast tick, recomputes every sum from the held lists.

// key is one topic or one user of the merged view.
type key struct {
	name string
	hash uint64 // of name in the table's seed: most probes that miss compare no bytes

	// Published copies, read by lookups without a lock.
	pubMsgs, pubBytes atomic.Uint64 // float64 bits
	pubOthers         atomic.Uint64 // float64 bits: msgs less this instance's own sample
	pubSubs           atomic.Int64

	// The merge lock guards the rest.
	msgs, bytes float64 // running sums
	own         float64 // this instance's own sample's messages/s, part of msgs
	subs        int64
	n           int32  // rate entries naming it
	inst        int64  // contributing instances: 1 per slice entry, a merged view's own count per view entry
	ns          int32  // subs entries naming it (topics)
	id          int32  // dense id while named by a contribution; -1 while dormant
	mark        uint64 // the batch that last touched it
}

func (k *key) live() bool { return k.n+k.ns > 0 }

// table maps names to keys for lookups that take no lock while the merge
// writes it. It is open addressing with linear probing, and a slot only
// ever goes from empty to a key: keys are never removed or moved in place,
// so a probe chain a reader walks is never broken. A key no contribution
// names any more stays in its slot, dormant and zero, and is revived if the
// name comes back; when dormant and live keys fill three quarters of the
// slots the merge publishes a new table of the live keys only (keyset.grow).
type table struct {
	seed  maphash.Seed
	mask  uint64
	slots []atomic.Pointer[key]
}

func newTable(seed maphash.Seed, size int) *table {
	return &table{seed: seed, mask: uint64(size - 1), slots: make([]atomic.Pointer[key], size)}
}

// find returns name's key, or nil. Safe without the merge lock.
func (t *table) find(name string) *key {
	h := t.hash(name)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if k := t.slots[i].Load(); k == nil || k.hash == h && k.name == name {
			return k
		}
	}
}

// hash is name's hash in this table. Every table of a keyset shares one
// seed, so a key's hash stays valid when it moves to a larger table.
func (t *table) hash(name string) uint64 { return maphash.String(t.seed, name) }

// insert adds k, whose name is not in t and whose hash is set, to a table
// with a free slot.
func (t *table) insert(k *key) {
	for i := k.hash & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == nil {
			t.slots[i].Store(k)
			return
		}
	}
}

// keyset is the merge's side of one table: which keys are live, their
// dense ids, and how full the table is.
type keyset struct {
	tab  atomic.Pointer[table]
	used int    // occupied slots, live and dormant
	byID []*key // live keys by id; nil where the id is free
	free []int32
}

const minTableSize = 16

// lookup is find on the current table. Safe without the merge lock.
func (s *keyset) lookup(name string) *key { return s.tab.Load().find(name) }

// acquire returns name's key with a dense id, creating or reviving it.
func (s *keyset) acquire(name string) *key {
	t := s.tab.Load()
	k := t.find(name)
	if k == nil {
		if 4*(s.used+1) > 3*len(t.slots) {
			t = s.grow()
		}
		// A copy: name may be a view of a received payload, which a
		// dormant key must not keep alive.
		k = &key{name: strings.Clone(name), hash: t.hash(name), id: -1}
		t.insert(k)
		s.used++
	}
	if k.id < 0 {
		if n := len(s.free); n > 0 {
			k.id, s.free = s.free[n-1], s.free[:n-1]
			s.byID[k.id] = k
		} else {
			k.id = int32(len(s.byID))
			s.byID = append(s.byID, k)
		}
	}
	return k
}

// retire makes k, which nothing names any more, dormant: its id is free.
func (s *keyset) retire(k *key) {
	s.byID[k.id] = nil
	s.free = append(s.free, k.id)
	k.id = -1
}

// grow publishes a table of the live keys at most half full, so at least
// half as many inserts as there are live keys fit before the next one: the
// copy is amortised over the inserts that made it necessary. A lookup
// still probing the old table finds what it held then; a dormant key left
// behind there reads zero, as it should.
func (s *keyset) grow() *table {
	live := len(s.byID) - len(s.free)
	size := minTableSize
	for size < 2*(live+1) {
		size *= 2
	}
	t := newTable(s.tab.Load().seed, size)
	for _, k := range s.byID {
		if k != nil {
			t.insert(k)
		}
	}
	s.used = live
	s.tab.Store(t)
	return t
}

// remote is the latest accepted envelope of one sibling.
type remote struct {
	id      string
	ts      int64     // sender's clock: ordering only
	arrived time.Time // receiver's clock: freshness
	slice   []wireTopic
	users   []wireUser
	subs    []wireSub

	tkeys, skeys, ukeys []*key // keys of slice, subs and users, once put
	older, newer        *remote
}

// merger holds every contribution (own and siblings') and the running sums.
// Not safe for concurrent use: the Aggregator's merge lock guards it. The
// lookups (rateOf, rateOfUser, subscribersOf) are safe from any goroutine.
type merger struct {
	topics, users keyset

	// The top-N tree (see rank).
	leaves int     // power of two >= len(topics.byID)
	win    []int32 // win[1] the best topic id; win[leaves+id] the leaf of id; -1: none
	heap   []int32 // top's scratch

	batch            uint64
	touchT, touchU   []*key
	local            *pressure.Snapshot
	lt, lu, ls       []*key // keys of local.TopTopics, local.TopUsers, lsubs
	lsubs            []SubjectCount
	remotes          map[string]*remote
	oldest, youngest *remote // remotes by arrival
}

func newMerger() *merger {
	m := &merger{remotes: map[string]*remote{}, batch: 1}
	m.topics.tab.Store(newTable(maphash.MakeSeed(), minTableSize))
	m.users.tab.Store(newTable(maphash.MakeSeed(), minTableSize))
	return m
}

func (m *merger) rateOf(topic string) float64 {
	if k := m.topics.lookup(topic); k != nil {
		return math.Float64frombits(k.pubMsgs.Load())
	}
	return 0
}

func (m *merger) subscribersOf(topic string) int {
	if k := m.topics.lookup(topic); k != nil {
		return int(k.pubSubs.Load())
	}
	return 0
}

func (m *merger) rateOfUser(user string) float64 {
	if k := m.users.lookup(user); k != nil {
		return math.Float64frombits(k.pubMsgs.Load())
	}
	return 0
}

// othersOf and othersOfUser are rateOf and rateOfUser without this
// instance's own sample: what the other instances' lists add up to.
func (m *merger) othersOf(topic string) float64 {
	if k := m.topics.lookup(topic); k != nil {
		return math.Float64frombits(k.pubOthers.Load())
	}
	return 0
}

func (m *merger) othersOfUser(user string) float64 {
	if k := m.users.lookup(user); k != nil {
		return math.Float64frombits(k.pubOthers.Load())
	}
	return 0
}

// touch records that k changed in the current batch.
func (m *merger) touch(k *key, list *[]*key) {
	if k.mark != m.batch {
		k.mark = m.batch
		*list = append(*list, k)
	}
}

func (m *merger) addRate(k *key, msgs, bytes float64, inst int, list *[]*key) {
	k.n++
	k.inst += int64(inst)
	k.msgs += msgs
	k.bytes += bytes
	m.touch(k, list)
}

func (m *merger) subRate(k *key, msgs, bytes float64, inst int, list *[]*key) {
	k.inst -= int64(inst)
	if k.n--; k.n == 0 {
		k.msgs, k.bytes = 0, 0 // no rounding left behind
	} else {
		k.msgs, k.bytes = max(k.msgs-msgs, 0), max(k.bytes-bytes, 0)
	}
	m.touch(k, list)
}

func (m *merger) addSubs(k *key, count int) {
	k.ns++
	k.subs += int64(count)
	m.touch(k, &m.touchT)
}

func (m *merger) subSubs(k *key, count int) {
	k.ns--
	k.subs -= int64(count)
	m.touch(k, &m.touchT)
}

// commit publishes every key the batch touched, retires those nothing
// names any more, and re-plays their places in the top-N tree.
func (m *merger) commit() {
	full := len(m.topics.byID) > m.leaves
	for _, k := range m.touchT {
		k.pubMsgs.Store(math.Float64bits(k.msgs))
		k.pubOthers.Store(math.Float64bits(max(k.msgs-k.own, 0)))
		k.pubBytes.Store(math.Float64bits(k.bytes))
		k.pubSubs.Store(k.subs)
		id := k.id
		if !k.live() {
			m.topics.retire(k)
		}
		if !full {
			m.rank(id)
		}
	}
	for _, k := range m.touchU {
		k.pubMsgs.Store(math.Float64bits(k.msgs))
		k.pubOthers.Store(math.Float64bits(max(k.msgs-k.own, 0)))
		if !k.live() {
			m.users.retire(k)
		}
	}
	if full {
		m.rebuildRanks()
	}
	clear(m.touchT)
	clear(m.touchU)
	m.touchT, m.touchU = m.touchT[:0], m.touchU[:0]
	m.batch++
}

// setLocal makes s this instance's own contribution (nil: none).
func (m *merger) setLocal(s *pressure.Snapshot) {
	m.stageLocal(s)
	m.commit()
}

// stageLocal is setLocal without the commit.
func (m *merger) stageLocal(s *pressure.Snapshot) {
	oldS, oldT, oldU := m.local, m.lt, m.lu
	m.local, m.lt, m.lu = s, nil, nil
	if s != nil {
		m.lt = make([]*key, len(s.TopTopics))
		for i, t := range s.TopTopics {
			m.lt[i] = m.topics.acquire(t.Topic)
			m.addRate(m.lt[i], t.MessagesPerSec, t.BytesPerSec, 1, &m.touchT)
		}
		m.lu = make([]*key, len(s.TopUsers))
		for i, u := range s.TopUsers {
			m.lu[i] = m.users.acquire(u.User)
			m.addRate(m.lu[i], u.MessagesPerSec, 0, 1, &m.touchU)
		}
	}
	if oldS != nil {
		for i, t := range oldS.TopTopics {
			m.subRate(oldT[i], t.MessagesPerSec, t.BytesPerSec, 1, &m.touchT)
		}
		for i, u := range oldS.TopUsers {
			m.subRate(oldU[i], u.MessagesPerSec, 0, 1, &m.touchU)
		}
		for _, k := range oldT {
			k.own = 0
		}
		for _, k := range oldU {
			k.own = 0
		}
	}
	if s != nil {
		for i, t := range s.TopTopics {
			m.lt[i].own += t.MessagesPerSec
		}
		for i, u := range s.TopUsers {
			m.lu[i].own += u.MessagesPerSec
		}
	}
}

// setLocalSubs makes subs (entries with a positive count) this instance's
// own subscriber counts.
func (m *merger) setLocalSubs(subs []SubjectCount) {
	old, oldK := m.lsubs, m.ls
	m.lsubs, m.ls = nil, nil
	for _, s := range subs {
		if s.Count > 0 {
			k := m.topics.acquire(s.Topic)
			m.lsubs = append(m.lsubs, s)
			m.ls = append(m.ls, k)
			m.addSubs(k, s.Count)
		}
	}
	for i, s := range old {
		m.subSubs(oldK[i], s.Count)
	}
	m.commit()
}

// put makes r the contribution of sibling r.id, replacing any earlier one.
func (m *merger) put(r *remote) {
	m.stage(r)
	m.commit()
}

// stage is put without the commit.
func (m *merger) stage(r *remote) {
	m.add(r)
	old := m.remotes[r.id]
	if old != nil {
		m.subtract(old)
		m.unlink(old)
	}
	m.remotes[r.id] = r
	m.link(r)
}

// drop forgets sibling id.
func (m *merger) drop(id string) {
	if r := m.remotes[id]; r != nil {
		m.forget(r)
		m.commit()
	}
}

// dropAll forgets every sibling.
func (m *merger) dropAll() {
	for m.oldest != nil {
		m.forget(m.oldest)
	}
	m.commit()
}

// expire forgets the siblings whose latest envelope arrived staleAfter or
// longer before now: the oldest first, so the cost is that of what leaves.
func (m *merger) expire(now time.Time, staleAfter time.Duration) {
	if m.oldest == nil || now.Sub(m.oldest.arrived) < staleAfter {
		return
	}
	for m.oldest != nil && now.Sub(m.oldest.arrived) >= staleAfter {
		m.forget(m.oldest)
	}
	m.commit()
}

func (m *merger) forget(r *remote) {
	m.subtract(r)
	m.unlink(r)
	delete(m.remotes, r.id)
}

func (m *merger) add(r *remote) {
	r.tkeys = make([]*key, len(r.slice))
	for i, t := range r.slice {
		r.tkeys[i] = m.topics.acquire(t.Topic)
		m.addRate(r.tkeys[i], t.MessagesPerSec, t.BytesPerSec, t.instances(), &m.touchT)
	}
	r.skeys = make([]*key, len(r.subs))
	for i, s := range r.subs {
		r.skeys[i] = m.topics.acquire(s.Topic)
		m.addSubs(r.skeys[i], s.Count)
	}
	r.ukeys = make([]*key, len(r.users))
	for i, u := range r.users {
		r.ukeys[i] = m.users.acquire(u.User)
		m.addRate(r.ukeys[i], u.MessagesPerSec, 0, 1, &m.touchU)
	}
}

func (m *merger) subtract(r *remote) {
	for i, t := range r.slice {
		m.subRate(r.tkeys[i], t.MessagesPerSec, t.BytesPerSec, t.instances(), &m.touchT)
	}
	for i, s := range r.subs {
		m.subSubs(r.skeys[i], s.Count)
	}
	for i, u := range r.users {
		m.subRate(r.ukeys[i], u.MessagesPerSec, 0, 1, &m.touchU)
	}
}

// link places r in arrival order, from the young end: arrivals come in
// order, so this is one step unless the clock went back.
func (m *merger) link(r *remote) {
	p := m.youngest
	for p != nil && p.arrived.After(r.arrived) {
		p = p.older
	}
	r.older = p
	if p == nil {
		r.newer, m.oldest = m.oldest, r
	} else {
		r.newer, p.newer = p.newer, r
	}
	if r.newer == nil {
		m.youngest = r
	} else {
		r.newer.older = r
	}
}

func (m *merger) unlink(r *remote) {
	if r.older == nil {
		m.oldest = r.newer
	} else {
		r.older.newer = r.newer
	}
	if r.newer == nil {
		m.youngest = r.older
	} else {
		r.newer.older = r.older
	}
	r.older, r.newer = nil, nil
}

// resum recomputes every running sum from the held contributions, so
// rounding from subtractions never outlives one call. It costs a pass over
// everything held: call it once per broadcast tick, not per envelope.
func (m *merger) resum() {
	for _, k := range m.topics.byID {
		if k != nil {
			k.msgs, k.bytes, k.subs, k.inst = 0, 0, 0, 0
			m.touch(k, &m.touchT)
		}
	}
	for _, k := range m.users.byID {
		if k != nil {
			k.msgs = 0
			m.touch(k, &m.touchU)
		}
	}
	sumRates := func(k *key, msgs, bytes float64, inst int) { k.msgs += msgs; k.bytes += bytes; k.inst += int64(inst) }
	if s := m.local; s != nil {
		for i, t := range s.TopTopics {
			sumRates(m.lt[i], t.MessagesPerSec, t.BytesPerSec, 1)
		}
		for i, u := range s.TopUsers {
			sumRates(m.lu[i], u.MessagesPerSec, 0, 1)
		}
	}
	for i, s := range m.lsubs {
		m.ls[i].subs += int64(s.Count)
	}
	for r := m.oldest; r != nil; r = r.newer {
		for i, t := range r.slice {
			sumRates(r.tkeys[i], t.MessagesPerSec, t.BytesPerSec, t.instances())
		}
		for i, s := range r.subs {
			r.skeys[i].subs += int64(s.Count)
		}
		for i, u := range r.users {
			sumRates(r.ukeys[i], u.MessagesPerSec, 0, 1)
		}
	}
	m.leaves = 0 // one rebuild of the tree rather than a path per topic
	m.commit()
}

// rank re-plays topic id's path in the top-N tree: a leaf holds its id
// while the topic is published on (a topic only in "subs" is not a
// publisher), and every inner node the better of its two children. The
// re-play stops at the first node whose winner stays the same other
// topic: nothing above it depends on id. A quiet topic therefore costs a
// level or two, and only a topic that wins its way up costs the height.
func (m *merger) rank(id int32) {
	i := m.leaves + int(id)
	m.win[i] = -1
	if k := m.topics.byID[id]; k != nil && k.n > 0 {
		m.win[i] = id
	}
	for i > 1 {
		i /= 2
		was := m.win[i]
		m.win[i] = m.better(m.win[2*i], m.win[2*i+1])
		if m.win[i] == was && was != id {
			return
		}
	}
}

// rebuildRanks sizes the tree to the ids in use and fills it bottom up.
func (m *merger) rebuildRanks() {
	m.leaves = 1
	for m.leaves < len(m.topics.byID) {
		m.leaves *= 2
	}
	if cap(m.win) < 2*m.leaves {
		m.win = make([]int32, 2*m.leaves)
	}
	m.win = m.win[:2*m.leaves]
	for id := range m.leaves {
		m.win[m.leaves+id] = -1
		if id < len(m.topics.byID) {
			if k := m.topics.byID[id]; k != nil && k.n > 0 {
				m.win[m.leaves+id] = int32(id)
			}
		}
	}
	for i := m.leaves - 1; i >= 1; i-- {
		m.win[i] = m.better(m.win[2*i], m.win[2*i+1])
	}
}

// better is the higher-ranked of two topic ids (-1: none).
func (m *merger) better(a, b int32) int32 {
	if a < 0 {
		return b
	}
	if b < 0 {
		return a
	}
	x, y := m.topics.byID[a], m.topics.byID[b]
	if ranksBefore(x.msgs, x.bytes, x.name, y.msgs, y.bytes, y.name) {
		return a
	}
	return b
}

// top reads the n best topics off the tree, best first: a heap of tree
// nodes ordered by their winners, where taking a leaf yields its topic
// and taking an inner node offers its two children.
func (m *merger) top(n int) []Entry {
	out := make([]Entry, 0, n)
	if len(m.win) < 2 || m.win[1] < 0 {
		return out
	}
	h := append(m.heap[:0], 1)
	for len(out) < n && len(h) > 0 {
		var node int32
		node, h = m.popNode(h)
		if int(node) >= m.leaves {
			k := m.topics.byID[m.win[node]]
			out = append(out, Entry{Topic: k.name, MessagesPerSec: k.msgs, BytesPerSec: k.bytes, ContributingInstances: int(k.inst)})
			continue
		}
		for _, c := range [2]int32{2 * node, 2*node + 1} {
			if m.win[c] >= 0 {
				h = m.pushNode(h, c)
			}
		}
	}
	m.heap = h[:0]
	return out
}

// nodeBefore orders tree nodes in top's heap by their winners.
func (m *merger) nodeBefore(a, b int32) bool { return m.better(m.win[a], m.win[b]) == m.win[a] }

func (m *merger) pushNode(h []int32, node int32) []int32 {
	h = append(h, node)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !m.nodeBefore(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func (m *merger) popNode(h []int32) (int32, []int32) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		best, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && m.nodeBefore(h[l], h[best]) {
			best = l
		}
		if r < len(h) && m.nodeBefore(h[r], h[best]) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	return top, h
}

// ranksBefore is the order of the merged top-N: messages/s descending,
// then bytes/s descending, then topic ascending.
func ranksBefore(msgs, bytes float64, topic string, msgs2, bytes2 float64, topic2 string) bool {
	if msgs != msgs2 {
		return msgs > msgs2
	}
	if bytes != bytes2 {
		return bytes > bytes2
	}
	return topic < topic2
}
