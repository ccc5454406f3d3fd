package bus

import (
	"runtime"
	"strings"
	"time"

	"github.com/rtserver/rtserver/protocol"
)

// The receive path. A Subscription's goroutine reads what Redis pushes and
// hands each payload to its inbound, which does only the cheap part: it
// reads the envelope's header for the topic (or control key), drops its
// own echoes and, on the sharded bus, other topics of the partition, and
// queues the payload on the receive worker that owns the topic (by hash).
// The workers do the rest in parallel: check the signature, decode,
// validate the data, and hand the message to the Receiver. One topic
// always goes to one worker, so its messages reach the Receiver in the
// order Redis delivered them; different topics go through different
// cores.
//
// The read never waits for a worker: a stalled read would make Redis
// drop the connection at its pub/sub output buffer limit and lose every
// topic. A worker whose queue is full drops the message, counts it
// (slow_receiver), and owes the topic a gap: a marker queued behind the
// messages that went before, and before any later message of the topic,
// that makes the worker call Receiver.Gap(topic) (the server tells the
// topic's subscribers).

// inMsg is one received payload on its way to the Receiver, or a gap
// marker.
type inMsg struct {
	payload string   // the raw envelope, still signed
	topic   string   // read off the header: the worker owner's key; for a gap, the topic
	in      *inbound // the subscription it came through
	gap     bool     // a gap marker: no payload
	// A history topic's message (position.go): its place in the stream,
	// taken off the front of a position envelope; offset 0 otherwise.
	epoch  string
	offset uint64
}

// maxPendingGaps bounds the topics one worker may owe a gap at once; past
// it, a drop is only counted.
const maxPendingGaps = 4096

// newWorkerQueues splits size over the receive workers' queues: eight per
// core, because a worker's time goes mostly to socket writes (delivering
// to a small topic writes to each subscriber's socket at once), during
// which another worker can use the core.
func newWorkerQueues(size int) []chan inMsg {
	n := max(2, 8*runtime.GOMAXPROCS(0))
	qs := make([]chan inMsg, n)
	for i := range qs {
		qs[i] = make(chan inMsg, max(1, size/n))
	}
	return qs
}

// inbound is one subscription's side of the receive path. Every method
// runs on the subscription's goroutine, so its state needs no lock,
// except floor, which the workers read.
type inbound struct {
	e       *engine
	channel string
	accept  func(topic string) bool // nil: every topic
	floor   controlFloor
	pending []map[string]struct{} // topics owed a gap, by worker
	owed    int                   // sum of len(pending[i])
	// loggedGap rate-limits the warning: under overload gaps recur.
	loggedGap time.Time
}

func newInbound(e *engine, channel string, accept func(string) bool) *inbound {
	in := &inbound{e: e, channel: channel, accept: accept, pending: make([]map[string]struct{}, len(e.workers))}
	for i := range in.pending {
		in.pending[i] = map[string]struct{}{}
	}
	return in
}

// handle routes one payload to its worker.
func (in *inbound) handle(p string) {
	e := in.e
	if len(p) > e.maxEnv {
		e.dropReceived(DropOversize, in.channel, len(p))
		return
	}
	var epoch string
	var offset uint64
	self := e.id
	if len(p) > 0 && p[0] == positionVersion {
		var ok bool
		if epoch, offset, p, ok = splitPosition(p); !ok {
			e.dropReceived(DropMalformed, in.channel, len(p))
			return
		}
		self = "" // a position envelope comes back to its sender on purpose
	}
	version := byte(envelopeVersion)
	if len(p) > 0 && (p[0] == controlVersion || p[0] == noticeVersion) {
		version = p[0]
	}
	// The header is read before the signature is checked: it only picks
	// the worker; the worker checks everything.
	topic, _, own, reason := splitEnvelope(p, version, self, e.maxEnv, anyKey)
	switch {
	case own && offset == 0:
		return
	case own: // a position envelope that names no instance
		e.dropReceived(DropMalformed, in.channel, len(p))
		return
	case reason != "":
		e.dropReceived(reason, in.channel, len(p))
		return
	}
	if in.accept != nil && !in.accept(topic) {
		// Another topic (or control key) hashed into the same
		// partition: not a drop.
		return
	}
	if version == controlVersion && offset == 0 {
		// Control messages have a worker and a budget of their own: no
		// flood of data or notices takes their room (notice.go).
		select {
		case e.ctlIn <- inMsg{payload: p, topic: topic, in: in}:
		default:
			e.dropSlowRecv.Inc()
			e.log.Warn("bus: dropped a received control message: its queue is full", "reason", DropSlowRecv, "key", topic)
		}
		return
	}
	w := workerOf(topic, len(e.workers))
	if in.owed > 0 {
		in.payGaps(w)
		if _, owed := in.pending[w][topic]; owed {
			// Its gap marker could not be queued, so neither can
			// anything that must follow it.
			in.dropSlow(w, topic)
			return
		}
	}
	select {
	case e.workers[w] <- inMsg{payload: p, topic: topic, in: in, epoch: epoch, offset: offset}:
	default:
		in.dropSlow(w, topic)
	}
}

// dropSlow counts a message the worker had no room for and owes its
// topic a gap.
func (in *inbound) dropSlow(w int, topic string) {
	e := in.e
	e.dropSlowRecv.Inc()
	if protocol.Reserved(topic) || len(in.pending[w]) >= maxPendingGaps {
		return // a control key has no subscribers to tell
	}
	if _, ok := in.pending[w][topic]; !ok {
		in.pending[w][topic] = struct{}{}
		in.owed++
		if now := time.Now(); now.Sub(in.loggedGap) >= time.Second {
			in.loggedGap = now
			e.log.Warn("bus: dropped received messages: the receive workers fall behind", "reason", DropSlowRecv, "topic", topic)
		}
	}
}

// payGaps queues worker w's owed gap markers while it has room.
func (in *inbound) payGaps(w int) {
	for topic := range in.pending[w] {
		select {
		case in.e.workers[w] <- inMsg{topic: topic, in: in, gap: true}:
			delete(in.pending[w], topic)
			in.owed--
		default:
			return
		}
	}
}

// idle pays what gaps it can while the channel is quiet, so that a topic
// that falls silent after a drop still hears of it.
func (in *inbound) idle() {
	for w := range in.pending {
		if in.owed == 0 {
			return
		}
		in.payGaps(w)
	}
}

// anyKey accepts any key: the header read only routes.
func anyKey(string) bool { return true }

// workerOf is the worker of a topic: FNV-1a, like Partition, but salted
// so that the topics of one partition spread over the workers.
func workerOf(topic string, n int) int {
	h := uint32(2166136261) ^ 0x9e3779b9
	for i := 0; i < len(topic); i++ {
		h ^= uint32(topic[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// worker checks and delivers what q brings, in order, until q is closed.
// With a HoldingReceiver its deliveries are held while q has more and
// flushed whenever q is empty, so nothing waits on a message to come.
func (e *engine) worker(q chan inMsg, r Receiver) {
	defer e.bg.Done()
	var h Holder
	if hr, ok := r.(HoldingReceiver); ok {
		h = hr.Holder()
	}
	for m := range q {
		if m.gap {
			r.Gap(m.topic)
		} else {
			e.receive(m, r, h)
		}
		if h != nil && len(q) == 0 {
			h.Flush()
		}
	}
}

// receive checks one received payload and hands it to r (through h, when
// the worker has one).
func (e *engine) receive(m inMsg, r Receiver, h Holder) {
	p := m.payload
	var stamp int64
	if e.signer != nil {
		env, st, ok := e.signer.verify(p)
		if !ok {
			// Counted as malformed; the log line says why.
			e.dropReceived("bad_signature", m.in.channel, len(p))
			return
		}
		p, stamp = env, st
	}
	control := isControl(p)
	notice := len(p) > 0 && p[0] == noticeVersion
	var topic, data string
	var own bool
	var reason string
	var seq uint64
	var sender string
	switch {
	case (control || notice) && m.offset > 0:
		reason = DropMalformed // no control message or notice has a position
	case control:
		sender, topic, seq, data, own, reason = decodeControl(p, e.id, e.maxEnv)
	case notice:
		topic, data, own, reason = decodeNotice(p, e.id, e.maxEnv)
	case m.offset > 0:
		topic, data, own, reason = decodeEnvelope(p, "", e.maxEnv) // our own too (position.go)
	default:
		topic, data, own, reason = decodeEnvelope(p, e.id, e.maxEnv)
	}
	switch {
	case own && m.offset == 0:
		return
	case own:
		reason = DropMalformed
	case reason != "":
		e.dropReceived(reason, m.in.channel, len(p))
		return
	}
	if control && e.signer != nil && !e.ctl.admit(&m.in.floor, sender, seq, stamp, time.Now().UnixMilli(), e.pingWait) {
		e.dropReceived("replayed", m.in.channel, len(p))
		return
	}
	buf := []byte(data)
	if !validData(buf) {
		e.dropReceived(DropMalformed, m.in.channel, len(p))
		return
	}
	e.m.BusReceived.Inc()
	if control {
		r.DeliverControl(strings.Clone(topic), buf)
		return
	}
	if notice {
		r.DeliverNotice(strings.Clone(topic), buf)
		return
	}
	if m.offset > 0 {
		// A worker's Holder that takes positions holds them like the
		// rest of its deliveries.
		pr, ok := h.(PositionReceiver)
		if !ok {
			pr, ok = r.(PositionReceiver)
		}
		if !ok {
			e.dropReceived(DropMalformed, m.in.channel, len(p))
			return
		}
		pr.DeliverAt(strings.Clone(topic), buf, strings.Clone(m.epoch), m.offset)
		return
	}
	// The topic is cloned so the Receiver may keep it without pinning the
	// whole payload.
	if h != nil {
		h.Deliver(strings.Clone(topic), buf)
		return
	}
	r.Deliver(strings.Clone(topic), buf)
}

// dropReceived counts and logs a received envelope that failed validation.
func (e *engine) dropReceived(reason, channel string, size int) {
	switch reason {
	case DropOversize:
		e.dropOversize.Inc()
	case DropBadTopic:
		e.dropBadTopic.Inc()
	default:
		e.dropMalformed.Inc()
	}
	e.log.Warn("bus: dropped a received envelope", "reason", reason, "channel", channel, "bytes", size)
}

// subscribe opens the subscription of channel, feeding the workers. The
// caller holds e.pubMu (start) or has checked that the engine is started
// and not closed, under a lock close also takes.
func (e *engine) subscribe(channel string, accept func(string) bool) *Subscription {
	in := newInbound(e, channel, accept)
	var onConfirm func()
	if e.signer != nil {
		// Only signed control messages are numbered (control.go).
		onConfirm = func() { e.ctl.confirmed(&in.floor, e.pingWait) }
	}
	sub := Subscribe(SubscriptionConfig{
		Client:      e.client,
		Channel:     channel,
		Sharded:     e.sharded,
		Handle:      in.handle,
		OnIdle:      in.idle,
		OnConfirm:   onConfirm,
		OnState:     e.subState,
		IdleAfter:   e.pingEvery,
		PingTimeout: e.pingWait,
		Logger:      e.log,
	})
	e.loops.Add(1)
	go func() {
		<-sub.Done()
		e.loops.Done()
	}()
	return sub
}
