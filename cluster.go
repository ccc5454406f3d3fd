package rtserver

import (
	"fmt"
	"log/slog"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/message/clusterrate"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
)

// cluster holds the parts that need Redis: the client, the aggregator and
// the limiter of cluster-scoped admission parts. The bus and the
// aggregator share one instance id, so logs and envelopes agree.
//
// For a Redis Cluster, name more seed nodes in redis.url's query:
// redis://host1:6379?addr=host2:6379&addr=host3:6379 (any addr parameter
// selects the cluster client).
type cluster struct {
	client  redis.UniversalClient
	agg     *publishrate.Aggregator
	limiter *clusterrate.Limiter
	// scoped: some class has a cluster-scoped part, so the limiter is
	// warmed up at start.
	scoped bool
}

func newCluster(cfg Config, m *metrics.Metrics, log *slog.Logger, mon *pressure.Monitor) (*cluster, error) {
	client, err := redisClient(cfg.Redis.URL)
	if err != nil {
		return nil, err
	}
	rates := cfg.PublishRate
	rates.Metrics = m
	rates.Logger = log
	agg, err := publishrate.New(client, mon, rates)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	return &cluster{
		client:  client,
		agg:     agg,
		limiter: clusterrate.New(client, clusterrate.Options{Prefix: cfg.Redis.ChannelPrefix}),
		scoped:  cfg.Admission.ClusterScoped(),
	}, nil
}

// newBus is the Redis bus of cfg.Bus. One fleet secret signs both kinds
// of envelope (bus messages and rate envelopes): whoever can forge one
// could forge the other.
func (c *cluster) newBus(cfg bus.Config, secret []byte, m *metrics.Metrics, log *slog.Logger) (bus.Bus, error) {
	ropts := bus.RedisOptions{
		Client:        c.client,
		ChannelPrefix: cfg.ChannelPrefix,
		PublishQueue:  cfg.PublishQueue,
		PublishWait:   cfg.PublishWait,
		InstanceID:    c.agg.InstanceID(),
		Metrics:       m,
		Logger:        log,
		HMACSecret:    secret,
	}
	var b bus.Bus
	var err error
	switch cfg.Bus {
	case "", "single":
		b, err = bus.NewRedis(ropts)
	case "sharded":
		b, err = bus.NewSharded(bus.ShardedOptions{RedisOptions: ropts, Partitions: cfg.Partitions, Cluster: c.agg})
	default:
		err = fmt.Errorf("redis.bus: unknown bus %q (single | sharded)", cfg.Bus)
	}
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	return b, nil
}

// redisClient opens a plain client, or a cluster client when the URL names
// more nodes with addr parameters.
func redisClient(raw string) (redis.UniversalClient, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("rtserver: redis.url: %w", err)
	}
	if u.Query().Has("addr") {
		opts, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, fmt.Errorf("rtserver: redis.url: %w", err)
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("rtserver: redis.url: %w", err)
	}
	// Every caller bounds its Redis calls with a context deadline (a
	// PING's 500ms, a subscription's open, a history read); the socket
	// must honour it, or a Redis that accepts and never answers holds each
	// call for go-redis's own 3s read timeout times its retries, start-up
	// and stop included.
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), nil
}
