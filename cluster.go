package rtserver

import (
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/message/clusterrate"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
	"github.com/rtserver/rtserver/server"
)

// cluster holds the parts that need Redis: the client, the aggregator and
// the limiter of cluster-scoped admission parts. Every part carries the
// node's one instance id, so logs and envelopes agree.
//
// bus.NewClient builds the one client from redis.* (one server, a
// primary found through Sentinel, or a Redis Cluster); every part here
// and the bus, history and presence stores share it.
type cluster struct {
	client  redis.UniversalClient
	agg     *publishrate.Aggregator
	limiter *clusterrate.Limiter
	// ceilings shares fleet-wide adaptive concurrency limits; the message
	// tier's are exchanged through it while the node runs (parts.go).
	ceilings *clusterrate.Ceilings
	// scoped: some class has a cluster-scoped part, so the limiter is a
	// part of the node: its Start warms it up.
	scoped bool
}

func newCluster(cfg Config, id string, m *metrics.Metrics, log *slog.Logger, mon *pressure.Monitor, subs *server.Subscribers) (*cluster, error) {
	client, err := bus.NewClient(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	agg, err := publishrate.New(cfg.PublishRate, publishrate.Deps{Client: client, Local: mon, Subscribers: subs, InstanceID: id, Metrics: m, Logger: log})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	// The limiter and the ceilings only fail without a client.
	rcfg := clusterrate.Config{Prefix: cfg.Redis.ChannelPrefix}
	limiter, _ := clusterrate.New(rcfg, clusterrate.Deps{Client: client, Logger: log})
	ceilings, _ := clusterrate.NewCeilings(rcfg, clusterrate.Deps{Client: client, InstanceID: id})
	return &cluster{
		client:   client,
		agg:      agg,
		limiter:  limiter,
		ceilings: ceilings,
		scoped:   cfg.Admission.ClusterScoped(),
	}, nil
}

// newBus is the Redis bus of cfg.Bus on the cluster's client. One fleet
// secret signs both kinds of envelope (bus messages and rate envelopes):
// whoever can forge one could forge the other.
func (c *cluster) newBus(cfg bus.Config, id string, secret []byte, m *metrics.Metrics, log *slog.Logger) (bus.Bus, error) {
	b, err := bus.New(cfg, bus.Deps{Client: c.client, InstanceID: id, HMACSecret: secret, Cluster: c.agg, Metrics: m, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	return b, nil
}
