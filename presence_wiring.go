package rtserver

import (
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/server"
)

// presenceOptions wires presence (docs/presence.md): which topics keep it
// comes from the topic namespaces; the entries live in the process with
// the memory bus and in Redis with either Redis bus, under the hash tags of
// the bus partitions. Called once n.access (and n.cluster, with Redis)
// exist; the store's expiry hook reaches n.server once it does.
func (n *Node) presenceOptions(cfg Config) (server.PresenceOptions, error) {
	o := server.PresenceOptions{Config: cfg.Presence}
	if !n.access.KeepsPresence() {
		return o, nil
	}
	o.Mode = func(topic string) presence.Mode {
		p, jl := n.access.Presence(topic)
		return presence.Mode{Presence: p, JoinLeave: jl}
	}
	if n.cluster == nil {
		return o, nil
	}
	store, err := presence.NewRedisStore(presence.RedisOptions{
		Client:        n.cluster.client,
		ChannelPrefix: cfg.Redis.ChannelPrefix,
		Partitions:    cfg.Redis.Partitions,
		TTL:           cfg.Presence.TTL,
		Expired:       func(topic string, gone []presence.Entry) { n.server.PresenceExpired(topic, gone) },
	})
	if err != nil {
		return o, err
	}
	o.Store = store
	return o, nil
}
