package rtserver

import (
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/server"
)

// presenceOptions wires presence (docs/presence.md): which topics keep it
// comes from the topic namespaces; the entries live in the process with
// the memory bus and in Redis with either Redis bus, under the hash tags of
// the bus partitions. Called once n.access (and n.cluster, with Redis)
// exist; the server makes the Redis store, with its own expiry hook.
func (n *Node) presenceOptions(cfg Config) server.PresenceOptions {
	o := server.PresenceOptions{Config: cfg.Presence}
	if !n.access.KeepsPresence() {
		return o
	}
	o.Mode = func(topic string) presence.Mode {
		p, jl := n.access.Presence(topic)
		return presence.Mode{Presence: p, JoinLeave: jl}
	}
	if n.cluster != nil {
		o.Redis = &presence.RedisDeps{
			Client:        n.cluster.client,
			ChannelPrefix: cfg.Redis.ChannelPrefix,
			Partitions:    cfg.Redis.Partitions,
		}
	}
	return o
}
