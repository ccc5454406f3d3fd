package publishrate

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/envsign"
)

// Merged mode (Options.Mode "merged", docs/cluster.md "Merged mode").
// Every instance publishes its slice on sliceChannel (Channel+":in"),
// which only the merging instance subscribes to; the merging instance
// merges the fleet's slices as broadcast mode merges siblings' (in
// a.fleet) and publishes the merged view on viewChannel (Channel+":view")
// every half PublishInterval; every instance, the merging one included,
// subscribes to the views and holds the latest as its whole cluster view
// (its own rates are in it), falling back to its own rates alone while it
// holds no fresh view.
//
// The merging instance holds a lease in Redis (leaseKey, SET NX with a
// TTL of 1.5 intervals, renewed every half interval) and a fencing number
// (epoch, from epochKey) that its views carry; receivers refuse a view
// from a lower epoch than the one they hold while that one is fresh, so
// two instances that both believe they merge (a paused merger, a Redis
// fail-over that lost the lease) never make the view count twice.

// viewID is the merged view's place among the cluster view's
// contributions: no instance id can take it (ids are topic characters).
const viewID = "\x00view"

// leadState is the merging role: epoch 0 while this instance does not
// merge. Only the lead loop's goroutine touches it.
type leadState struct {
	epoch int64
	ticks int // renewals since elected: the first view waits a full interval of slices
	// renewed: when Redis last confirmed the lease.
	renewed time.Time
	claim   string // the lease value Redis holds for this instance
	sub     *bus.Subscription
}

// The lease scripts. KEYS[1] the lease, KEYS[2] the epoch counter (one
// hash tag, one slot); ARGV[1] this instance's claim (leaseClaim), ARGV[2]
// the TTL in ms.
//
// Whoever can write Redis keys can write these two. A lease value that is
// not a valid claim (leaseValid: signed with the fleet key when there is
// one, current, with a TTL) is ignored and overwritten, so a stuck or
// forged value cannot stop the fleet from merging; a counter that is not a
// plain non-negative integer counts as absent, so the epoch still rises
// above every one seen in a view and a claim never fails on it.
var (
	// claimLease takes the lease if it is free, or if it holds ARGV[4]
	// (a value the claimant found invalid), and returns {the new epoch}:
	// one more than the larger of the stored counter and ARGV[3], the
	// highest epoch the claimant has seen in a view (a Redis that failed
	// over may have lost the counter). Otherwise {0, the value, its PTTL}.
	claimLease = redis.NewScript(`
local took = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not took and ARGV[4] ~= '' and redis.call('GET', KEYS[1]) == ARGV[4] then
  took = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if not took then return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])} end
local c = redis.call('GET', KEYS[2])
if not c or not string.match(c, '^%d+$') or #c > 15 then c = '0' end
local e = math.max(tonumber(c), tonumber(ARGV[3])) + 1
redis.call('SET', KEYS[2], string.format('%d', e))
return {e}`)
	// renewLease extends the lease, as the new claim ARGV[3], if it still
	// holds this instance's claim ARGV[1]: 1, else 0.
	renewLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
  return 1
end
return 0`)
	// releaseLease frees the lease if it holds this instance's claim.
	releaseLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// leaseClaim is the lease value of this instance until until: "<until
// ms> <id> <MAC>", the MAC the fleet signer's over the rest under the
// lease domain ("-" without a signer).
func (a *Aggregator) leaseClaim(until time.Time) string {
	body := strconv.FormatInt(until.UnixMilli(), 10) + " " + a.id
	if a.signer == nil {
		return body + " -"
	}
	mac := a.signer.MAC(envsign.MergerLease, body)
	return body + " " + hex.EncodeToString(mac[:])
}

// leaseValid reports whether v, with pttl ms left in Redis, is a claim a
// live instance could hold now: it expires (pttl > 0), names an instance,
// runs out no later than a TTL (plus the fleet's clock window) from now
// and not before now minus that window, and carries the fleet signer's
// MAC when there is a signer. Anything else is ignored and overwritten.
func (a *Aggregator) leaseValid(v string, pttl int64, now time.Time) bool {
	untilMs, rest, ok1 := strings.Cut(v, " ")
	id, mac, ok2 := strings.Cut(rest, " ")
	ms, err := strconv.ParseInt(untilMs, 10, 64)
	if pttl <= 0 || !ok1 || !ok2 || err != nil || id == "" {
		return false
	}
	until := time.UnixMilli(ms)
	if until.Before(now.Add(-envsign.Window)) || until.After(now.Add(a.leaseTTL+envsign.Window)) {
		return false
	}
	if a.signer == nil {
		return true
	}
	got, err := hex.DecodeString(mac)
	return err == nil && envsign.Equal(a.signer.MAC(envsign.MergerLease, untilMs+" "+id), string(got))
}

// claim runs claimLease, taking over a value found invalid at once.
func (a *Aggregator) claim(ctx context.Context, now time.Time, ttl int64) (epoch int64, claim string, err error) {
	claim = a.leaseClaim(now.Add(a.leaseTTL))
	invalid := ""
	for range 2 {
		v, err := claimLease.Run(ctx, a.client, []string{a.leaseKey, a.epochKey}, claim, ttl, a.epochSeen.Load(), invalid).Slice()
		if err != nil {
			return 0, "", err
		}
		if e, _ := v[0].(int64); e > 0 || len(v) < 3 {
			return e, claim, nil
		}
		held, _ := v[1].(string)
		pttl, _ := v[2].(int64)
		if held == "" || a.leaseValid(held, pttl, now) {
			return 0, "", nil
		}
		a.leaseTrouble(now, "the merging instance's lease in Redis is not a valid claim: overwriting it", errors.New("invalid lease value"))
		invalid = held
	}
	return 0, "", nil
}

// leadLoop runs the election every half PublishInterval: claim the lease
// when it is free, renew it while held, and publish the merged view once
// the first full interval of slices is in.
func (a *Aggregator) leadLoop(ctx context.Context) {
	defer a.wg.Done()
	t := time.NewTicker(a.opts.PublishInterval / 2)
	defer t.Stop()
	a.leadTick(ctx) // the fleet's first instance need not wait a tick
	for {
		select {
		case <-ctx.Done():
			a.stepDown(true)
			return
		case <-t.C:
			a.leadTick(ctx)
		}
	}
}

func (a *Aggregator) leadTick(ctx context.Context) {
	now := a.now()
	// A Redis slower than a tick delays the next one (the ticker drops
	// ticks) rather than costing the lease: past the TTL it is gone
	// anyway.
	rctx, cancel := context.WithTimeout(ctx, a.leaseTTL)
	defer cancel()
	ttl := a.leaseTTL.Milliseconds()
	if a.lead.epoch == 0 {
		a.mu.Lock()
		if a.fleet != nil {
			a.fleet.expire(now, a.opts.StaleAfter) // what it merged before: drains
		}
		a.mu.Unlock()
		epoch, claim, err := a.claim(rctx, now, ttl)
		if err != nil {
			a.leaseTrouble(now, "cannot claim the merging instance's lease", err)
			return
		}
		if epoch > 0 {
			a.becomeMerger(epoch, now)
			a.lead.claim = claim
		}
		return
	}
	renewed := a.leaseClaim(now.Add(a.leaseTTL))
	held, err := renewLease.Run(rctx, a.client, []string{a.leaseKey}, a.lead.claim, ttl, renewed).Int()
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		a.leaseTrouble(now, "cannot renew the merging instance's lease", err)
		if now.Sub(a.lead.renewed) >= a.leaseTTL {
			a.stepDown(false) // it has expired by now: another may hold it
		}
		return
	case held == 0:
		a.log.Warn("lost the merging instance's lease; another instance merges", "epoch", a.lead.epoch)
		a.stepDown(false)
		return
	}
	a.lead.renewed, a.lead.claim = now, renewed
	if a.lead.ticks++; a.lead.ticks >= 2 {
		a.publishView(rctx, now)
	}
}

func (a *Aggregator) leaseTrouble(now time.Time, msg string, err error) {
	if a.logLease.allow(now) {
		a.log.Warn(msg, "err", err)
	}
}

// becomeMerger starts merging the fleet's slices under epoch. An
// instance that merged before (it lost the lease for a moment: a slow
// renewal, a Redis restart) still holds what it merged then, fresh slices
// and all, and publishes at once; one that starts empty waits a full
// interval of slices first, so its first view is not partial.
func (a *Aggregator) becomeMerger(epoch int64, now time.Time) {
	a.lead = leadState{epoch: epoch, renewed: now}
	a.mu.Lock()
	if a.fleet == nil || len(a.fleet.remotes) == 0 {
		a.fleet = newMerger()
	} else {
		a.lead.ticks = 2
	}
	a.mu.Unlock()
	a.merging.Store(true)
	a.lead.sub = a.subscribe(a.sliceChannel, a.receiveSlice)
	a.log.Info("this instance is now the merging instance", "epoch", epoch)
}

// stepDown ends the merging role, releasing the lease in Redis when
// release is set (a clean stop: another instance takes over at its next
// tick instead of after the TTL).
func (a *Aggregator) stepDown(release bool) {
	if a.lead.epoch == 0 {
		return
	}
	a.lead.sub.Close() // before taking a.mu: its Handle takes it
	a.merging.Store(false)
	if release {
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.PublishInterval/2)
		_ = releaseLease.Run(ctx, a.client, []string{a.leaseKey}, a.lead.claim).Err()
		cancel()
	}
	a.lead = leadState{}
}

// receiveSlice takes one instance's slice off sliceChannel, on the
// merging instance: its own slice too.
func (a *Aggregator) receiveSlice(payload string) {
	now := a.now()
	e, err := decodeEnvelope(payload, a.signer, a.opts.maxEnvelopeBytes, a.maxList)
	if err != nil {
		a.dropped(err, payload, now)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fleet != nil && a.merging.Load() {
		a.takeLocked(a.fleet, e, now)
	}
}

// publishView publishes the merged view of the fleet's fresh slices.
func (a *Aggregator) publishView(ctx context.Context, now time.Time) {
	a.mu.Lock()
	var e *envelope
	if a.fleet != nil {
		a.fleet.expire(now, a.opts.StaleAfter)
		e = a.viewEnvelopeLocked(now)
	}
	a.mu.Unlock()
	if e == nil {
		return
	}
	payload, err := a.encode(e)
	if err == nil {
		err = a.client.Publish(ctx, a.viewChannel, payload).Err()
	}
	if err != nil {
		a.leaseTrouble(now, "cannot publish the merged view", err)
		return
	}
	a.viewsPublished.Add(1)
}

// viewEnvelopeLocked is the merged view of a.fleet: its top maxList
// topics, users and subscriber counts. nil while no slice is held. a.mu
// is held.
func (a *Aggregator) viewEnvelopeLocked(now time.Time) *envelope {
	f := a.fleet
	if len(f.remotes) == 0 {
		return nil
	}
	k := a.maxList
	e := &envelope{V: viewVersion, InstanceID: a.id, TS: now.UnixMilli(), Epoch: a.lead.epoch, Instances: len(f.remotes)}
	for _, t := range f.top(k) {
		e.Slice = append(e.Slice, wireTopic{t.Topic, t.MessagesPerSec, t.BytesPerSec, t.ContributingInstances})
	}
	users := bestK[wireUser]{k: k, better: func(x, y wireUser) bool {
		return x.MessagesPerSec > y.MessagesPerSec || x.MessagesPerSec == y.MessagesPerSec && x.User < y.User
	}}
	for _, u := range f.users.byID {
		if u != nil && u.n > 0 {
			users.offer(wireUser{u.name, u.msgs})
		}
	}
	e.Users = users.sorted()
	subs := bestK[wireSub]{k: k, better: func(x, y wireSub) bool {
		return x.Count > y.Count || x.Count == y.Count && x.Topic < y.Topic
	}}
	for _, t := range f.topics.byID {
		if t != nil && t.ns > 0 && t.subs > 0 {
			subs.offer(wireSub{t.name, int(min(t.subs, maxCount))})
		}
	}
	e.Subs = subs.sorted()
	return e
}

// bestK keeps the k best values it is offered, in a heap whose root is
// the worst kept: choosing a view's lists costs one comparison for most of
// what the fleet holds (tens of thousands of users at 1,000 instances)
// instead of sorting it all twice per interval.
type bestK[T any] struct {
	k      int
	better func(x, y T) bool // a strict order
	h      []T
}

func (b *bestK[T]) offer(v T) {
	if len(b.h) < b.k {
		b.h = append(b.h, v)
		for i := len(b.h) - 1; i > 0; {
			p := (i - 1) / 2
			if !b.better(b.h[p], b.h[i]) {
				break
			}
			b.h[p], b.h[i] = b.h[i], b.h[p]
			i = p
		}
		return
	}
	if b.k == 0 || !b.better(v, b.h[0]) {
		return
	}
	b.h[0] = v
	for i := 0; ; {
		worst, l, r := i, 2*i+1, 2*i+2
		if l < len(b.h) && b.better(b.h[worst], b.h[l]) {
			worst = l
		}
		if r < len(b.h) && b.better(b.h[worst], b.h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		b.h[i], b.h[worst] = b.h[worst], b.h[i]
		i = worst
	}
}

// sorted is what was kept, best first; never nil.
func (b *bestK[T]) sorted() []T {
	out := append(make([]T, 0, len(b.h)), b.h...)
	slices.SortFunc(out, func(x, y T) int {
		switch {
		case b.better(x, y):
			return -1
		case b.better(y, x):
			return 1
		}
		return 0
	})
	return out
}

// receiveView takes a merged view off viewChannel: it becomes the whole
// cluster view, this instance's own rates included, unless it is older
// than the view held, by epoch and then by ts, while that one is fresh.
func (a *Aggregator) receiveView(payload string) {
	now := a.now()
	e, err := decodeView(payload, a.signer, a.opts.maxEnvelopeBytes, a.maxList)
	if err != nil {
		a.dropped(err, payload, now)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.active {
		return
	}
	a.mergeLocked(now) // a stale view holds nothing back
	held := a.viewHeldLocked()
	if !a.inClockWindow(e, now) || held && (e.Epoch < a.viewEpoch || e.Epoch == a.viewEpoch && e.TS <= a.viewTS) {
		a.outdated.Add(1)
		return
	}
	if e.Epoch > a.epochSeen.Load() {
		a.epochSeen.Store(e.Epoch)
	}
	a.viewEpoch, a.viewTS, a.viewInstances = e.Epoch, e.TS, e.Instances
	// One commit: a lookup sees the old view with this instance's rates
	// or the new view, never both.
	a.mg.stage(&remote{id: viewID, ts: e.TS, arrived: now, slice: e.Slice, users: e.Users, subs: e.Subs})
	a.mg.stageLocal(nil)
	a.mg.commit()
	a.viewHeld.Store(true)
	a.received.Add(1)
	a.m.ClusterReceived.Inc()
	a.mergeLocked(now)
}

// viewHeldLocked reports whether the cluster view is a merged view. a.mu
// is held.
func (a *Aggregator) viewHeldLocked() bool {
	_, ok := a.mg.remotes[viewID]
	return ok
}

// syncLocalLocked makes this instance's latest sample its contribution to
// the cluster view, unless a merged view (which has it) is held. a.mu is
// held.
func (a *Aggregator) syncLocalLocked() {
	want := a.latest
	if a.merged && a.viewHeldLocked() {
		want = nil
	}
	if a.mg.local != want {
		a.mg.setLocal(want)
	}
}
