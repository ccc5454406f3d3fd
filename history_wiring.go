package rtserver

import (
	"fmt"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/history"
)

// historyStore wires history (docs/history.md): which topics keep it
// comes from the topic namespaces; the streams live in Redis beside
// either Redis bus (b), whose scripts publish through it. nil when no
// topic keeps history, and with the memory bus, where the server makes
// the in-process store with its own delivery (as it makes the presence
// store). Called once n.access (and n.cluster, with Redis) exist.
func (n *Node) historyStore(cfg Config, b bus.Bus) (history.Store, error) {
	if !n.access.KeepsHistory() {
		return nil, nil
	}
	if n.cluster == nil {
		return nil, nil // the server keeps the streams in its process
	}
	hp, ok := b.(bus.HistoryPublisher)
	if !ok {
		return nil, fmt.Errorf("redis.bus %q cannot carry history", cfg.Redis.Bus)
	}
	store, err := history.NewRedis(cfg.History, history.RedisDeps{
		Client:      n.cluster.client,
		Bus:         hp,
		KeyPrefix:   cfg.Redis.ChannelPrefix,
		Partitions:  cfg.Redis.Partitions,
		StoreErrors: n.metrics.HistoryStoreErrors,
		Logger:      n.log,
		Down:        b.Degraded,
	})
	if err != nil {
		return nil, err
	}
	n.history = store
	return store, nil
}

// historyPolicy is the server's history policy: the topic grants'
// namespaces, when some topic keeps history.
func (n *Node) historyPolicy() func(string) history.Policy {
	if !n.access.KeepsHistory() {
		return nil
	}
	return n.access.HistoryOf
}
