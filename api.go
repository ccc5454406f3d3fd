package rtserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
	"github.com/rtserver/rtserver/serverapi"
)

// mountAPI serves the server API (docs/server-api.md) on the admin
// listener when there is one, else on the main listener. The API key
// guards it either way; on a main listener reachable beyond loopback it
// also faces the clients' network, which start-up says once.
func (n *Node) mountAPI() error {
	h, err := serverapi.New(serverapi.Options{
		Key:          n.cfg.API.Key,
		MaxBodyBytes: n.cfg.Limits.MaxMessageBytes,
		MaxJSONDepth: n.cfg.Limits.MaxJSONDepth,
		Backend:      apiBackend{n},
		Metrics:      n.metrics,
		Logger:       n.log,
	})
	if err != nil {
		return err
	}
	// POST only: a pattern for every method would conflict with an
	// application's "GET /" on the same mux (HandleHTTP).
	pattern := http.MethodPost + " " + serverapi.Prefix
	if n.adminMux != nil {
		n.adminMux.Handle(pattern, h)
		return nil
	}
	n.mux.Handle(pattern, h)
	if !loopback(n.cfg.Listen) {
		n.log.Warn("the server API is served on the main listener, which listens beyond loopback: set adminListen to keep it off the clients' network", "listen", n.cfg.Listen)
	}
	return nil
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newInstanceID is a single instance's id (with Redis, the bus and the
// aggregator share theirs).
func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errDegraded refuses an API publish while cross-instance delivery is
// down, before any local subscriber has it: the backend's retry then
// duplicates nothing.
var errDegraded = fmt.Errorf("cross-instance delivery is down; retry later: %w", bus.ErrDegraded)

// apiBackend carries out server API calls on this node.
type apiBackend struct{ n *Node }

func (b apiBackend) Publish(topic string, data json.RawMessage) error {
	if b.n.server.Degraded() {
		return errDegraded
	}
	return b.n.server.Publish(topic, data)
}

// PublishAt is Publish with the position of a history topic's message.
func (b apiBackend) PublishAt(ctx context.Context, topic string, data json.RawMessage, key string) (*history.Position, error) {
	if b.n.server.Degraded() {
		return nil, errDegraded
	}
	pos, ok, err := b.n.server.PublishHistory(ctx, topic, data, key)
	if err != nil || !ok {
		return nil, err
	}
	return &pos, nil
}

func (b apiBackend) History(ctx context.Context, topic string, since *protocol.Since, limit int) (json.RawMessage, error) {
	res, err := b.n.server.History(ctx, topic, since, limit)
	if errors.Is(err, server.ErrNoHistory) {
		return nil, serverapi.ErrNoHistory
	}
	return res, err
}

func (b apiBackend) Disconnect(user string) error { return b.n.server.Disconnect(user) }

func (b apiBackend) Unsubscribe(user, topic string) error {
	return b.n.server.Unsubscribe(user, topic)
}

func (b apiBackend) Presence(ctx context.Context, topic, cursor string) (presence.Page, error) {
	return b.n.server.Presence(ctx, topic, cursor)
}

func (b apiBackend) PresenceStats(ctx context.Context, topic string) (presence.Stats, error) {
	return b.n.server.PresenceStats(ctx, topic)
}

func (b apiBackend) Draining() bool { return b.n.server.Draining() }

func (b apiBackend) Info() serverapi.Info {
	conns, _ := b.n.server.Counts()
	info := serverapi.Info{InstanceID: b.n.instanceID, Connections: conns, Topics: b.n.server.Topics(), Instances: 1}
	if b.n.cluster != nil {
		info.Instances += b.n.cluster.agg.Stats().Instances
	}
	return info
}
