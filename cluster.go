package rtserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
	"github.com/rtserver/rtserver/server"
)

// Redis configures the cross-instance parts (redis.* and publishRate.* in
// docs/configuration.md). An empty URL means a single instance: the
// in-memory bus and no cluster view.
//
// For a Redis Cluster, name more seed nodes in the URL's query:
// redis://host1:6379?addr=host2:6379&addr=host3:6379 (any addr parameter
// selects the cluster client).
type Redis struct {
	URL           string
	Bus           string // single (default) | sharded
	Partitions    int    // sharded bus; default 16
	ChannelPrefix string // default "rt:"

	// The cluster aggregator (publishRate.*); zero values are its defaults.
	RateChannel         string
	RatePublishInterval time.Duration
	RateStaleAfter      time.Duration
	RateTopN            int
	RateMaxClockSkew    time.Duration
	HMACSecret          []byte
}

// DefaultRedis is the redis.* and publishRate.* defaults of
// docs/configuration.md.
func DefaultRedis() Redis {
	return Redis{
		Bus: "single", Partitions: 16, ChannelPrefix: "rt:",
		RateChannel: "rt:pressure:rates", RatePublishInterval: 5 * time.Second,
		RateStaleAfter: 12 * time.Second, RateTopN: 20,
		RateMaxClockSkew: 5 * time.Second,
	}
}

// cluster holds the Redis client, the bus and the aggregator. The bus and
// the aggregator share one instance id, so logs and envelopes agree.
type cluster struct {
	client redis.UniversalClient
	bus    bus.Bus
	agg    *publishrate.Aggregator
	srv    *server.Server // set by wireSubjects before anything runs
}

func newCluster(cfg Redis, m *metrics.Metrics, log *slog.Logger, mon *pressure.Monitor) (*cluster, error) {
	client, err := redisClient(cfg.URL)
	if err != nil {
		return nil, err
	}
	c := &cluster{client: client}
	c.agg, err = publishrate.New(client, mon, publishrate.Options{
		Channel:         cfg.RateChannel,
		PublishInterval: cfg.RatePublishInterval,
		StaleAfter:      cfg.RateStaleAfter,
		TopN:            cfg.RateTopN,
		MaxClockSkew:    cfg.RateMaxClockSkew,
		HMACSecret:      cfg.HMACSecret,
		Subjects:        c.subjects,
		LocalSubscribers: func(topic string) int {
			return c.srv.LocalSubscribers(topic)
		},
		Metrics: m,
		Logger:  log,
	})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("rtserver: publishRate: %w", err)
	}
	ropts := bus.RedisOptions{
		Client:        client,
		ChannelPrefix: cfg.ChannelPrefix,
		InstanceID:    c.agg.InstanceID(),
		Metrics:       m,
		Logger:        log,
		// One fleet secret signs both kinds of envelope: whoever can
		// forge one could forge the other.
		HMACSecret: cfg.HMACSecret,
	}
	switch cfg.Bus {
	case "", "single":
		c.bus, err = bus.NewRedis(ropts)
	case "sharded":
		c.bus, err = bus.NewSharded(bus.ShardedOptions{RedisOptions: ropts, Partitions: cfg.Partitions, Cluster: c.agg})
	default:
		err = fmt.Errorf("unknown bus %q (single | sharded)", cfg.Bus)
	}
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("rtserver: redis.bus: %w", err)
	}
	return c, nil
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
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("rtserver: redis.url: %w", err)
	}
	return redis.NewClient(opts), nil
}

func (c *cluster) subjects() []publishrate.SubjectCount {
	local := c.srv.Subjects()
	out := make([]publishrate.SubjectCount, len(local))
	for i, tc := range local {
		out[i] = publishrate.SubjectCount{Topic: tc.Topic, Count: tc.Count}
	}
	return out
}

func (c *cluster) wireSubjects(s *server.Server) { c.srv = s }

// start activates the aggregator (the server starts the bus).
func (c *cluster) start(ctx context.Context) error { return c.agg.Activate(ctx) }

// stop deactivates the aggregator and closes the client, after the server
// has closed the bus.
func (c *cluster) stop() {
	c.agg.Deactivate()
	c.client.Close()
}
