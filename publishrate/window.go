package publishrate

import (
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// window averages this instance's rates over one publish interval.
//
// A pressure sample taken at time t carries the rates measured since the
// previous sample, so it is weighted by the time from the previous sample
// (or the window's start, if later) to t. The average of a topic is then
// sum(rate_i * dt_i) / sum(dt_i) over the samples of the window; a sample
// that lacks the topic counts as rate 0 for it. A window without samples
// (sampling slower than broadcasting) reports the latest sample as is, and
// so does a window whose samples all carry zero weight.
//
// Keys are bounded by maxKeys per list; topics first seen past it in a
// window are left out of that window's average.
type window struct {
	maxKeys int

	start   time.Time
	last    time.Time // time of the latest sample in this window; zero: none yet
	weight  float64   // seconds covered by samples
	samples int
	topics  map[string]sums
	users   map[string]sums
}

type sums struct{ msgs, bytes float64 }

func newWindow(maxKeys int, start time.Time) *window {
	return &window{maxKeys: maxKeys, start: start, topics: map[string]sums{}, users: map[string]sums{}}
}

// reset starts a new window at start.
func (w *window) reset(start time.Time) {
	w.start, w.last, w.weight, w.samples = start, time.Time{}, 0, 0
	clear(w.topics)
	clear(w.users)
}

// add weighs the sample s, taken at t, into the window.
func (w *window) add(s *pressure.Snapshot, t time.Time) {
	from := w.last
	if from.IsZero() || from.Before(w.start) {
		from = w.start
	}
	dt := t.Sub(from).Seconds()
	if dt < 0 {
		dt = 0
	}
	w.samples++
	w.last = t
	if dt == 0 {
		return
	}
	w.weight += dt
	for _, r := range s.TopTopics {
		addSums(w.topics, w.maxKeys, r.Topic, r.MessagesPerSec*dt, r.BytesPerSec*dt)
	}
	for _, r := range s.TopUsers {
		addSums(w.users, w.maxKeys, r.User, r.MessagesPerSec*dt, r.BytesPerSec*dt)
	}
}

func addSums(m map[string]sums, maxKeys int, k string, msgs, bytes float64) {
	cur, ok := m[k]
	if !ok && len(m) >= maxKeys {
		return
	}
	cur.msgs += msgs
	cur.bytes += bytes
	m[k] = cur
}

// averages returns the window's per-topic and per-user average rates.
// latest is the newest sample overall, used when the window has no weight.
func (w *window) averages(latest *pressure.Snapshot) (topics []pressure.TopicRate, users []pressure.UserRate) {
	if w.weight == 0 {
		if latest == nil {
			return nil, nil
		}
		return latest.TopTopics, latest.TopUsers
	}
	topics = make([]pressure.TopicRate, 0, len(w.topics))
	for k, s := range w.topics {
		topics = append(topics, pressure.TopicRate{Topic: k, MessagesPerSec: s.msgs / w.weight, BytesPerSec: s.bytes / w.weight})
	}
	users = make([]pressure.UserRate, 0, len(w.users))
	for k, s := range w.users {
		users = append(users, pressure.UserRate{User: k, MessagesPerSec: s.msgs / w.weight, BytesPerSec: s.bytes / w.weight})
	}
	return topics, users
}
