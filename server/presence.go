package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/protocol"
)

// Presence (docs/presence.md): a connection subscribed to a topic whose
// mode keeps presence is an entry of that topic, from its subscribe until
// its unsubscribe or close; subscribers of a topic with joinLeave get the
// coalesced presence notifications. The presence.Tracker does the work;
// this file connects it to connections, the hub and the bus.
//
// Entries change under conn.subsMu, exactly where the connection's
// subscriptions change, so the tracker sees a connection's joins and
// leaves in the order its subscriptions had them (a server API unsubscribe
// racing a subscribe cannot leave a ghost entry). A subscribe waits, at
// most presenceWait, for its entry to be written, so that a client that
// lists a topic right after subscribing sees itself.

// Presence method names: client methods and server API methods alike.
const (
	MethodPresence      = protocol.MethodPresence
	MethodPresenceStats = protocol.MethodPresenceStats
)

// PresenceOptions configures presence (presence.* and the presence and
// joinLeave keys of topics.namespaces). The zero value keeps nothing.
type PresenceOptions struct {
	presence.Config
	// Store holds the fleet's entries; nil: in the process (memory bus),
	// unless Redis is set.
	Store presence.Store
	// Redis, when set and Store is nil, keeps the entries in Redis: New
	// makes the store on these dependencies and hands it the server's own
	// expiry hook (an entry removed because its instance stopped
	// refreshing it is announced as a leave); Expired must be nil.
	Redis *presence.RedisDeps
	// Mode says what a topic keeps; nil: nothing.
	Mode func(topic string) presence.Mode
}

// presenceWait bounds how long a subscribe waits for its entry to be
// written: past it (Redis slow or down) the subscribe succeeds anyway and
// the next refresh writes the entry.
const presenceWait = time.Second

// presenceTimeout bounds a presence or presenceStats call's store read.
const presenceTimeout = 2 * time.Second

// ReasonPresenceUnavailable is the -32001 reason of a presence call whose
// store (Redis) did not answer.
const ReasonPresenceUnavailable = "PRESENCE_UNAVAILABLE"

// ErrNoPresence is returned for a topic whose mode keeps no presence.
var ErrNoPresence = presence.ErrOff

func (s *Server) newTracker(o PresenceOptions) (*presence.Tracker, error) {
	store := o.Store
	if store == nil && o.Redis != nil {
		if o.Redis.Expired != nil {
			return nil, errors.New("server: PresenceOptions.Redis.Expired is the server's own")
		}
		ro := *o.Redis
		ro.Expired = s.presenceExpired
		rs, err := presence.NewRedisStore(o.Config, ro)
		if err != nil {
			return nil, err
		}
		store = rs
	}
	return presence.NewTracker(o.Config, presence.TrackerDeps{
		Store: store,
		Mode:  o.Mode,
		Send: func(topic string, data []byte) error {
			return s.bus.PublishNotice(presence.Key(topic), data)
		},
		Deliver: s.deliverPresence,
		Interest: func(topic string, on bool) {
			if on {
				s.bus.Subscribe(presence.Key(topic))
			} else {
				s.bus.Unsubscribe(presence.Key(topic))
			}
		},
		Metrics: s.m,
		Logger:  s.log,
	})
}

// ClientID is the fleet-wide id of a connection (presence entries name
// connections by it): unique across the fleet, stable for the
// connection's life.
func (s *Server) ClientID(connID uint64) string { return presence.ClientID(s.instanceID, connID) }

func (c *conn) presenceEntry() presence.Entry {
	return presence.Entry{Client: c.s.ClientID(c.id), User: c.ticket.User, Name: c.displayName()}
}

// nameKey is the context key of a connection's display name.
type nameKey struct{}

// connValues is the context whose values a connection keeps for its life:
// the upgrade request's, and the display name the client stated
// (handshake.DisplayName) when it stated one. It rides in the context so
// that a connection without one pays nothing for it.
func connValues(r *http.Request) context.Context {
	ctx := r.Context()
	if name := handshake.DisplayName(r); name != "" {
		ctx = context.WithValue(ctx, nameKey{}, name)
	}
	return ctx
}

// displayName is the name c stated when it connected; "" when none.
func (c *conn) displayName() string {
	name, _ := c.ctx.Value(nameKey{}).(string)
	return name
}

// presenceJoin records c's entry in topic. Caller holds c.subsMu.
func (c *conn) presenceJoin(topic string) {
	if c.s.presence.Mode(topic) != (presence.Mode{}) {
		c.s.presence.Update([]presence.Change{{Topic: topic, Entry: c.presenceEntry()}})
	}
}

// presenceLeave removes c's entry from topic. Caller holds c.subsMu.
func (c *conn) presenceLeave(topic string) {
	if c.s.presence.Mode(topic) != (presence.Mode{}) {
		c.s.presence.Update([]presence.Change{{Topic: topic, Entry: c.presenceEntry(), Leave: true}})
	}
}

// presenceLeaveAll removes c's entries from every topic it is subscribed
// to, in one store write, when it closes. Caller holds c.subsMu.
func (c *conn) presenceLeaveAll() {
	t := c.s.presence
	var changes []presence.Change
	for topic := range c.subs {
		if t.Mode(topic) != (presence.Mode{}) {
			changes = append(changes, presence.Change{Topic: topic, Entry: c.presenceEntry(), Leave: true})
		}
	}
	if changes != nil {
		t.Update(changes)
	}
}

// awaitPresence waits, bounded, until topic's entries queued so far are
// written, when topic keeps presence.
func (s *Server) awaitPresence(topic string) {
	if !s.presence.Mode(topic).Presence {
		return
	}
	t := time.NewTimer(presenceWait)
	defer t.Stop()
	select {
	case <-s.presence.Written():
	case <-t.C:
	}
}

// deliverPresence queues a presence notification to every local
// subscriber of topic, framed once.
func (s *Server) deliverPresence(topic string, payload []byte) int {
	list := s.hub.subscribers(topic)
	if len(list) == 0 {
		return 0
	}
	frame := frameText(payload)
	n := 0
	for _, c := range list {
		if c.enqueueFrame(frame, true) {
			n++
		}
	}
	s.m.MessagesSent.Add(float64(n))
	return n
}

// presenceExpired hands the tracker entries the store removed because
// their instance stopped refreshing them (presence.RedisDeps.Expired).
// The store runs it only once started, after New has set s.presence.
func (s *Server) presenceExpired(topic string, gone []presence.Entry) {
	s.presence.Expired(topic, gone)
}

// Presence lists a page (at most presence.MaxPage) of topic's entries
// across the fleet, after cursor ("" for the first page).
func (s *Server) Presence(ctx context.Context, topic, cursor string) (presence.Page, error) {
	if !s.presence.Mode(topic).Presence {
		return presence.Page{}, ErrNoPresence
	}
	return s.presence.Page(ctx, topic, cursor)
}

// PresenceStats counts topic's entries and users across the fleet.
func (s *Server) PresenceStats(ctx context.Context, topic string) (presence.Stats, error) {
	if !s.presence.Mode(topic).Presence {
		return presence.Stats{}, ErrNoPresence
	}
	return s.presence.Stats(ctx, topic)
}

// presenceCall answers presence and presenceStats: the subscribe grant
// first (-32003), then the message tier, then one store read. The params
// are read by the exact rule of every built-in (protocol's decoders).
func (c *conn) presenceCall(r *protocol.Request, raw []byte) (json.RawMessage, *protocol.Error) {
	s := c.s
	p, perr := protocol.DecodePresenceParams(r.Params)
	if perr != nil {
		return nil, perr
	}
	if perr := c.grant(MethodSubscribe, p.Topic); perr != nil {
		return nil, perr
	}
	if !s.presence.Mode(p.Topic).Presence {
		return nil, protocol.NewError(protocol.CodeInvalidParams, ErrNoPresence.Error(), protocol.TopicData{Topic: p.Topic})
	}
	call := &message.Call{Method: r.Method, Topic: p.Topic, Params: r.Params, Bytes: requestBytes(r, raw),
		User: c.ticket.User, IP: c.ticket.IPKey, ConnID: c.id}
	perr = c.admit(call)
	call.Params = nil
	if perr != nil {
		return nil, perr
	}
	defer call.Release()
	ctx, cancel := context.WithTimeout(&c.ctx, presenceTimeout)
	defer cancel()
	var v any
	var err error
	if r.Method == MethodPresence {
		v, err = s.presence.Page(ctx, p.Topic, p.Cursor)
	} else {
		v, err = s.presence.Stats(ctx, p.Topic)
	}
	if err != nil {
		s.log.Warn("presence read failed", "topic", p.Topic, "err", err)
		return nil, protocol.NewError(protocol.CodeOverloaded, "", protocol.OverloadedData{
			Reason: ReasonPresenceUnavailable, RetryAfterMs: hintMillis(time.Second),
		})
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, protocol.NewError(protocol.CodeInternal, "", nil)
	}
	return b, nil
}

// presenceControl takes a diff another instance sent on a presence key:
// a notice (bus.Bus.PublishNotice), or a control message from an
// instance that predates notices.
func (s *Server) presenceControl(key string, data []byte) bool {
	topic, ok := presence.TopicOfKey(key)
	if !ok {
		return false
	}
	if !s.presence.Receive(topic, data) {
		s.controlDropped(key)
	}
	return true
}
