package publishrate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/protocol"
)

// What an Aggregator sends: its own slice, every publish interval.

func (a *Aggregator) tickLoop(ctx context.Context) {
	defer a.wg.Done()
	t := time.NewTicker(a.opts.PublishInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.broadcast(ctx)
		}
	}
}

// broadcast closes the current averaging window, expires stale siblings
// and publishes this instance's envelope, through the breaker.
func (a *Aggregator) broadcast(ctx context.Context) {
	now := a.now()
	payload, err := a.collect(now)
	if err != nil {
		a.publishErrors.Add(1)
		if a.logPublish.allow(now) {
			a.log.Error("cannot build cluster rate envelope", "err", err)
		}
		return
	}
	if !a.breaker.Allow() {
		a.breakerSkips.Add(1)
		if a.logSkip.allow(now) {
			a.log.Warn("cluster rate broadcast skipped: breaker open")
		}
		return
	}
	pctx, cancel := context.WithTimeout(ctx, a.opts.PublishInterval)
	err = a.client.Publish(pctx, a.sliceChannel, payload).Err()
	cancel()
	if ctx.Err() != nil {
		return // Close: neither a success nor a failure of Redis
	}
	if err != nil {
		a.breaker.Failure()
		a.publishErrors.Add(1)
		if a.logPublish.allow(now) {
			a.log.Warn("cluster rate broadcast failed", "err", err)
		}
		return
	}
	a.breaker.Success()
	a.broadcasts.Add(1)
	a.m.ClusterBroadcasts.Inc()
}

// collect closes the averaging window at now, refreshes the local
// subscriber list, re-merges (expiring stale siblings) and encodes the
// envelope to send.
func (a *Aggregator) collect(now time.Time) ([]byte, error) {
	subs := a.subjects()
	var liveTopics []pressure.TopicRate
	var liveUsers []pressure.UserRate
	if a.live != nil {
		liveTopics, liveUsers = a.live.LiveTop(a.opts.TopN)
	}
	a.mu.Lock()
	topics, users := a.win.averages(a.latest)
	if a.live != nil {
		topics, users = liveTopics, liveUsers
	}
	a.win.reset(now)
	a.setLocalSubsLocked(subs)
	a.mg.resum()
	a.mergeLocked(now)
	a.refreshTopLocked()
	a.forgetSeen(now)
	a.mu.Unlock()
	e := a.newEnvelope(now, topics, users, subs)
	b, err := a.encode(e)
	if err == nil && a.live != nil {
		sr := &sentRates{topics: make(map[string]float64, len(e.Slice)), users: make(map[string]float64, len(e.Users))}
		for _, t := range e.Slice {
			sr.topics[t.Topic] = t.MessagesPerSec
		}
		for _, u := range e.Users {
			sr.users[u.User] = u.MessagesPerSec
		}
		a.sent.Store(sr)
	}
	return b, err
}

// setLocalSubsLocked makes subs the local part of SubscribersOf, unless
// the Subscribers answer that live. a.mu is held.
func (a *Aggregator) setLocalSubsLocked(subs []SubjectCount) {
	if a.liveSubs != nil {
		subs = nil
	}
	a.mg.setLocalSubs(subs)
}

func (a *Aggregator) subjects() []SubjectCount {
	if a.subs == nil {
		return nil
	}
	return a.subs.Subjects()
}

// newEnvelope builds this instance's envelope: each list deduplicated,
// stripped of idle entries and of entries a receiver would reject, sorted
// descending and cut to TopN. The inputs are only read.
func (a *Aggregator) newEnvelope(now time.Time, topics []pressure.TopicRate, users []pressure.UserRate, subs []SubjectCount) *envelope {
	e := &envelope{V: envelopeVersion, InstanceID: a.id, TS: now.UnixMilli()}

	tm := make(map[string]wireTopic, len(topics))
	for _, t := range topics {
		if !protocol.ValidTopic(t.Topic) {
			continue
		}
		w := tm[t.Topic]
		w.Topic, w.MessagesPerSec, w.BytesPerSec = t.Topic, w.MessagesPerSec+t.MessagesPerSec, w.BytesPerSec+t.BytesPerSec
		tm[t.Topic] = w
	}
	e.Slice = make([]wireTopic, 0, len(tm))
	for _, w := range tm {
		if validRate(w.MessagesPerSec) && validRate(w.BytesPerSec) && w.MessagesPerSec+w.BytesPerSec > 0 {
			e.Slice = append(e.Slice, w)
		}
	}
	slices.SortFunc(e.Slice, func(x, y wireTopic) int {
		return cmp.Or(cmp.Compare(y.MessagesPerSec, x.MessagesPerSec), cmp.Compare(y.BytesPerSec, x.BytesPerSec), cmp.Compare(x.Topic, y.Topic))
	})
	e.Slice = e.Slice[:min(len(e.Slice), a.opts.TopN)]

	type userSum struct{ msgs, bytes float64 }
	um := make(map[string]userSum, len(users))
	for _, u := range users {
		if validUser(u.User) {
			s := um[u.User]
			um[u.User] = userSum{s.msgs + u.MessagesPerSec, s.bytes + u.BytesPerSec}
		}
	}
	type userRow struct {
		wireUser
		bytes float64
	}
	rows := make([]userRow, 0, len(um))
	for u, s := range um {
		if validRate(s.msgs) && s.msgs > 0 {
			rows = append(rows, userRow{wireUser{u, s.msgs}, s.bytes})
		}
	}
	slices.SortFunc(rows, func(x, y userRow) int {
		return cmp.Or(cmp.Compare(y.MessagesPerSec, x.MessagesPerSec), cmp.Compare(y.bytes, x.bytes), cmp.Compare(x.User, y.User))
	})
	e.Users = make([]wireUser, 0, min(len(rows), a.opts.TopN))
	for _, r := range rows[:min(len(rows), a.opts.TopN)] {
		e.Users = append(e.Users, r.wireUser)
	}

	if a.subs != nil {
		sm := make(map[string]int, len(subs))
		for _, s := range subs {
			if protocol.ValidTopic(s.Topic) && s.Count > 0 {
				sm[s.Topic] = min(sm[s.Topic]+min(s.Count, maxCount), maxCount)
			}
		}
		e.Subs = make([]wireSub, 0, len(sm))
		for t, c := range sm {
			e.Subs = append(e.Subs, wireSub{t, c})
		}
		slices.SortFunc(e.Subs, func(x, y wireSub) int {
			return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Topic, y.Topic))
		})
		e.Subs = e.Subs[:min(len(e.Subs), a.opts.TopN)]
	}
	return e
}

// encode marshals and signs e, shortening its lists (lowest rates first)
// until it fits MaxEnvelopeBytes.
func (a *Aggregator) encode(e *envelope) ([]byte, error) {
	for {
		b, err := marshalSigned(e, a.signer)
		if err != nil || len(b) <= a.opts.maxEnvelopeBytes {
			return b, err
		}
		if len(e.Slice)+len(e.Users)+len(e.Subs) == 0 {
			return nil, fmt.Errorf("empty envelope of %d bytes exceeds MaxEnvelopeBytes %d", len(b), a.opts.maxEnvelopeBytes)
		}
		e.Slice = e.Slice[:len(e.Slice)*3/4]
		e.Users = e.Users[:len(e.Users)*3/4]
		if e.Subs != nil {
			e.Subs = e.Subs[:len(e.Subs)*3/4]
		}
	}
}

// logLimit lets one log line of a kind through per logEvery.
type logLimit struct{ last atomic.Int64 }

func (l *logLimit) allow(now time.Time) bool {
	n, last := now.UnixNano(), l.last.Load()
	if last != 0 && n-last < int64(logEvery) {
		return false
	}
	return l.last.CompareAndSwap(last, n)
}
