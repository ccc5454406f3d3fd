package publishrate

import (
	"time"

	"github.com/rtserver/rtserver/internal/envsign"
)

// What an Aggregator does with its siblings' slices (broadcast mode):
// decode, check freshness and clocks, hold, expire.

// receive handles one payload from the channel (broadcast mode). The
// envelope's strings stay views of payload (not copies) for as long as
// the sibling's slice is held.
func (a *Aggregator) receive(payload string) {
	now := a.now()
	e, err := decodeEnvelope(payload, a.signer, a.opts.maxEnvelopeBytes, a.maxList)
	if err != nil {
		a.dropped(err, payload, now)
		return
	}
	if e.InstanceID == a.id {
		return // our own broadcast, echoed by Redis
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.active {
		a.takeLocked(a.mg, e, now)
	}
}

// dropped counts and logs an envelope that did not decode.
func (a *Aggregator) dropped(err error, payload string, now time.Time) {
	a.parseErrors.Add(1)
	a.m.ClusterParseErrors.Inc()
	if a.logParse.allow(now) {
		a.log.Warn("dropped cluster rate envelope", "err", err, "bytes", len(payload))
	}
}

// takeLocked merges sibling slice e into mg (the cluster view in
// broadcast mode, the fleet's slices on the merging instance), unless it
// is outdated or mg holds MaxInstances others. a.mu is held.
func (a *Aggregator) takeLocked(mg *merger, e *envelope, now time.Time) {
	if !a.fresh(e, now) {
		a.outdated.Add(1)
		return
	}
	if _, ok := mg.remotes[e.InstanceID]; !ok && len(mg.remotes) >= a.opts.MaxInstances {
		a.expireLocked(mg, now) // forgets stale siblings, freeing room
		if len(mg.remotes) >= a.opts.MaxInstances {
			a.ignoreLocked(e.InstanceID, now)
			return
		}
	}
	a.seen[e.InstanceID] = e.TS
	mg.put(&remote{id: e.InstanceID, ts: e.TS, arrived: now, slice: e.Slice, users: e.Users, subs: e.Subs})
	if _, ok := a.ignored[e.InstanceID]; ok {
		delete(a.ignored, e.InstanceID)
		a.m.ClusterInstancesIgnored.Set(float64(len(a.ignored)))
	}
	a.received.Add(1)
	a.m.ClusterReceived.Inc()
	a.expireLocked(mg, now)
}

// expireLocked forgets mg's stale slices; for the cluster view that is
// mergeLocked. a.mu is held.
func (a *Aggregator) expireLocked(mg *merger, now time.Time) {
	if mg == a.mg {
		a.mergeLocked(now)
		return
	}
	mg.expire(now, a.opts.StaleAfter)
}

// ignoreLocked counts an envelope from instance id left out because
// MaxInstances siblings are held. a.mu is held.
func (a *Aggregator) ignoreLocked(id string, now time.Time) {
	a.instIgnored.Add(1)
	a.m.ClusterIgnored.Inc()
	if _, ok := a.ignored[id]; ok || len(a.ignored) < a.opts.MaxInstances {
		a.ignored[id] = now
		a.m.ClusterInstancesIgnored.Set(float64(len(a.ignored)))
	}
	if a.logInstances.allow(now) {
		a.log.Warn("ignoring envelopes from new instances: publishRate.maxInstances siblings held; the cluster view is missing them",
			"from", id, "maxInstances", a.opts.MaxInstances, "instancesIgnored", len(a.ignored))
	}
}

// fresh reports whether e may be accepted: its ts is within
// StaleAfter+MaxClockSkew of this instance's clock, and newer than any
// envelope accepted from the same sibling. Without these, an envelope
// captured off Redis (signed, so it passes the HMAC check) could be
// replayed once its sender was forgotten, however old, and keep its
// topics shed for as long as the replays go on. a.mu is held.
func (a *Aggregator) fresh(e *envelope, now time.Time) bool {
	if !a.inClockWindow(e, now) {
		return false
	}
	hw, ok := a.seen[e.InstanceID]
	return !ok || e.TS > hw
}

// inClockWindow reports whether e's ts is within StaleAfter+MaxClockSkew
// of this instance's clock (and, when signed, within the fleet's replay
// window).
func (a *Aggregator) inClockWindow(e *envelope, now time.Time) bool {
	window := a.opts.StaleAfter + a.opts.MaxClockSkew
	if len(a.opts.HMACSecret) > 0 {
		// The fleet's replay rule for signed envelopes binds too; with
		// the default staleAfter and maxClockSkew it is the wider one.
		window = min(window, envsign.Window)
	}
	if age := now.Sub(time.UnixMilli(e.TS)); age > window || age < -window {
		if a.logClock.allow(now) {
			a.log.Warn("dropped cluster rate envelope: its ts is too far from this instance's clock (a replay, or clocks apart by more than publishRate.maxClockSkew)",
				"from", e.InstanceID, "age", age, "window", window)
		}
		return false
	}
	return true
}

// forgetSeen drops the high-water marks that the clock window alone now
// enforces (any envelope at or below them is too old to pass), and the
// ignored instances not heard from within StaleAfter. It scans every
// entry, so it runs on samples and ticks, not per envelope. a.mu is held.
func (a *Aggregator) forgetSeen(now time.Time) {
	oldest := now.Add(-(a.opts.StaleAfter + a.opts.MaxClockSkew)).UnixMilli()
	for id, ts := range a.seen {
		if ts < oldest {
			delete(a.seen, id)
		}
	}
	for id, at := range a.ignored {
		if now.Sub(at) >= a.opts.StaleAfter {
			delete(a.ignored, id)
		}
	}
	a.m.ClusterInstancesIgnored.Set(float64(len(a.ignored)))
}
