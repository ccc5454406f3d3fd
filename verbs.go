package rtserver

import (
	"context"
	"encoding/json"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/serverapi"
)

// The node's verbs are the server API's (docs/server-api.md), for Go
// code: the API carries out its calls through them, so both give the
// same answers, degraded mode included. They skip the message tier and
// the topic grants: the caller is trusted.

// Publish sends data to every subscriber of topic across the fleet (see
// server.Server.Publish). While cross-instance delivery is down it
// refuses with bus.ErrDegraded before any local subscriber has the
// message, so a retry duplicates nothing (docs/cluster.md).
func (n *Node) Publish(topic string, data json.RawMessage) error {
	if n.server.Degraded() {
		return bus.ErrDegraded
	}
	return n.server.Publish(topic, data)
}

// PublishAt is Publish through the history store when topic keeps
// history (docs/history.md): it returns the message's position then, nil
// otherwise. key, when not empty, is an idempotency key: a retry with the
// same key is stored once.
func (n *Node) PublishAt(ctx context.Context, topic string, data json.RawMessage, key string) (*history.Position, error) {
	if n.server.Degraded() {
		return nil, bus.ErrDegraded
	}
	pos, ok, err := n.server.PublishHistory(ctx, topic, data, key)
	if err != nil || !ok {
		return nil, err
	}
	return &pos, nil
}

// History reads topic's stream after since (nil: the latest limit
// messages; limit <= 0: the default): {"epoch","offset","messages"}, as
// the history method answers. server.ErrNoHistory for a topic that keeps
// none.
func (n *Node) History(ctx context.Context, topic string, since *protocol.Since, limit int) (json.RawMessage, error) {
	return n.server.History(ctx, topic, since, limit)
}

// Presence lists a page of topic's entries across the fleet after cursor
// ("" for the first), and PresenceStats counts them (docs/presence.md);
// presence.ErrOff for a topic that keeps no presence.
func (n *Node) Presence(ctx context.Context, topic, cursor string) (presence.Page, error) {
	return n.server.Presence(ctx, topic, cursor)
}

// PresenceStats counts topic's entries and users across the fleet.
func (n *Node) PresenceStats(ctx context.Context, topic string) (presence.Stats, error) {
	return n.server.PresenceStats(ctx, topic)
}

// Disconnect closes every connection of user on every instance.
func (n *Node) Disconnect(user string) error { return n.server.Disconnect(user) }

// Unsubscribe removes user's subscriptions to topic on every instance.
func (n *Node) Unsubscribe(user, topic string) error { return n.server.Unsubscribe(user, topic) }

// Info describes this instance and the fleet it sees (the info method).
func (n *Node) Info() serverapi.Info {
	conns, _ := n.server.Counts()
	info := serverapi.Info{InstanceID: n.instanceID, Connections: conns, Topics: n.server.Topics(), Instances: 1}
	if n.cluster != nil {
		info.Instances += n.cluster.agg.Stats().Instances
	}
	return info
}
