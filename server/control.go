package server

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/protocol"
)

// Control of connections by user, for the server API (docs/server-api.md):
// disconnect every connection of a user, or take a user's connections off
// a topic, on every instance. The instance that takes the call applies it
// to its own connections and sends it to the others as a bus control
// message routed by bus.UserKey(user); each instance declares interest in
// that key (bus.Subscribe) while the user has a connection on it, which is
// what the sharded bus routes by.
//
// Only authenticated connections are indexed by user: anonymous ones have
// no user to name.

// Close reason of a connection closed by Disconnect (close code 1008).
const DisconnectedReason = "disconnected"

// controlOp is the JSON body of a control message.
type controlOp struct {
	Op    string `json:"op"` // "disconnect" | "unsubscribe"
	User  string `json:"user"`
	Topic string `json:"topic,omitempty"`
}

const (
	opDisconnect  = "disconnect"
	opUnsubscribe = "unsubscribe"
)

// ErrBadUser is returned for an empty user or one longer than MaxUserLen.
var ErrBadUser = errors.New("server: user must be 1 to 1024 bytes")

// MaxUserLen is the longest user id Disconnect and Unsubscribe accept.
const MaxUserLen = handshake.MaxUserLen

// Disconnect closes every connection of user, on this instance and on every
// other, with close code 1008 and reason "disconnected". Queued messages
// are written first (bounded by the write timeout). The error is the bus's
// when the other instances could not be told (this instance's connections
// are closed either way).
func (s *Server) Disconnect(user string) error {
	if user == "" || len(user) > MaxUserLen {
		return ErrBadUser
	}
	s.disconnectLocal(user)
	return s.sendControl(controlOp{Op: opDisconnect, User: user})
}

// Unsubscribe takes every connection of user, on this instance and on
// every other, off topic; each connection that was subscribed gets the
// system notification {"event":"unsubscribed","topic":T}. The error is an
// invalid topic or user, or the bus's when the other instances could not
// be told (this instance's connections have left either way).
func (s *Server) Unsubscribe(user, topic string) error {
	if user == "" || len(user) > MaxUserLen {
		return ErrBadUser
	}
	if msg := protocol.CheckTopic(topic); msg != "" {
		return errors.New("server: " + msg)
	}
	s.unsubscribeLocal(user, topic)
	return s.sendControl(controlOp{Op: opUnsubscribe, User: user, Topic: topic})
}

func (s *Server) sendControl(op controlOp) error {
	data, err := json.Marshal(op)
	if err != nil {
		return err
	}
	return s.bus.PublishControl(bus.UserKey(op.User), data)
}

// DeliverControl applies a control message from another instance.
func (r *busReceiver) DeliverControl(key string, data []byte) {
	s := (*Server)(r)
	if s.presenceControl(key, data) {
		return
	}
	var op controlOp
	if err := json.Unmarshal(data, &op); err != nil || key != bus.UserKey(op.User) || op.User == "" {
		s.controlDropped(key)
		return
	}
	switch op.Op {
	case opDisconnect:
		s.disconnectLocal(op.User)
	case opUnsubscribe:
		if protocol.CheckTopic(op.Topic) != "" {
			s.controlDropped(key)
			return
		}
		s.unsubscribeLocal(op.User, op.Topic)
	default:
		// A newer instance's operation: nothing to do here, but say so.
		s.controlDropped(key)
	}
}

// DeliverNotice takes a notice from another instance: a presence diff.
// Notices are not single use (bus.Bus.PublishNotice), so a notice never
// acts on a user's connections.
func (r *busReceiver) DeliverNotice(key string, data []byte) {
	s := (*Server)(r)
	if !s.presenceControl(key, data) {
		s.controlDropped(key)
	}
}

func (s *Server) controlDropped(key string) {
	s.m.BusDropped.WithLabelValues(bus.DropMalformed).Inc()
	s.log.Warn("dropped a control message this instance cannot apply", "key", key)
}

// userConns returns a copy of user's connections on this instance.
func (s *Server) userConns(user string) []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.users[user])
}

func (s *Server) disconnectLocal(user string) {
	for _, c := range s.userConns(user) {
		c.closeLater(websocket.StatusPolicyViolation, DisconnectedReason, true, nil)
	}
}

func (s *Server) unsubscribeLocal(user, topic string) {
	var frame []byte
	for _, c := range s.userConns(user) {
		if !c.removeSub(topic) {
			continue
		}
		if frame == nil {
			frame = protocol.AppendUnsubscribed(nil, topic)
		}
		c.enqueue(frame)
	}
}

// indexUser adds c to the user index; it reports whether c is its user's
// first connection here. Caller holds s.mu.
func (s *Server) indexUser(c *conn) bool {
	u := c.ticket.User
	if u == "" {
		return false
	}
	cs := s.users[u]
	s.users[u] = append(cs, c)
	return len(cs) == 0
}

// unindexUser removes c from the user index; it reports whether c was its
// user's last connection here. Caller holds s.mu.
func (s *Server) unindexUser(c *conn) bool {
	u := c.ticket.User
	cs := s.users[u]
	i := slices.Index(cs, c)
	if i < 0 {
		return false
	}
	cs = slices.Delete(cs, i, i+1)
	if len(cs) == 0 {
		delete(s.users, u)
		return true
	}
	s.users[u] = cs
	return false
}

// addSub subscribes c to topic (nothing when it already is), within the
// per-connection limit. The read goroutine calls it for the subscribe
// method.
func (c *conn) addSub(topic string) *protocol.Error {
	s := c.s
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if _, ok := c.subs[topic]; ok {
		return nil
	}
	if len(c.subs) >= s.cfg.MaxSubscriptionsPerConn {
		return protocol.NewError(protocol.CodeLimitExceeded, "too many subscriptions", protocol.LimitData{Limit: s.cfg.MaxSubscriptionsPerConn})
	}
	if c.subs == nil {
		c.subs = map[string]struct{}{}
	}
	c.subs[topic] = struct{}{}
	s.addSubscriptions(1)
	s.hub.subscribe(c, topic)
	c.presenceJoin(topic)
	return nil
}

// removeSub takes c off topic and reports whether it was subscribed. The
// read goroutine (unsubscribe method) and Unsubscribe (server API) call it.
func (c *conn) removeSub(topic string) bool {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if _, ok := c.subs[topic]; !ok {
		return false
	}
	delete(c.subs, topic)
	c.s.addSubscriptions(-1)
	c.s.hub.unsubscribe(c, topic)
	c.s.hist.leave(c, topic)
	c.presenceLeave(topic)
	return true
}

// dropSubs takes c off every topic when it ends.
func (c *conn) dropSubs() {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for topic := range c.subs {
		c.s.hub.unsubscribe(c, topic)
		c.s.hist.leave(c, topic)
	}
	c.presenceLeaveAll()
	if len(c.subs) > 0 { // none (most of a connect storm): no shared add
		c.s.addSubscriptions(-int64(len(c.subs)))
	}
	c.subs = nil
}
