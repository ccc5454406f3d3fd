package rtserver

import (
	"fmt"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/history"
)

// historyStore wires history (docs/history.md): which topics keep it
// comes from the topic namespaces; the streams live in the process with
// the memory bus, and in Redis beside either Redis bus (b), whose scripts
// publish through it. nil when no topic keeps history. Called once
// n.access (and n.cluster, with Redis) exist.
func (n *Node) historyStore(cfg Config, b bus.Bus) (history.Store, error) {
	if !n.access.KeepsHistory() {
		return nil, nil
	}
	if n.cluster == nil {
		return history.NewMemory(cfg.History, history.MemoryDeps{
			Evicted: n.metrics.HistoryEvictions,
			Deliver: func(topic, epoch string, m history.Message) { n.server.DeliverHistory(topic, epoch, m) },
		})
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
func (n *Node) historyPolicy(store history.Store) func(string) history.Policy {
	if store == nil {
		return nil
	}
	return n.access.HistoryOf
}
