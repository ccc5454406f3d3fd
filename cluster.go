package rtserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
	"github.com/rtserver/rtserver/server"
)

// cluster holds the Redis client, the bus and the aggregator. The bus and
// the aggregator share one instance id, so logs and envelopes agree.
type cluster struct {
	client redis.UniversalClient
	bus    bus.Bus
	agg    *publishrate.Aggregator
	srv    *server.Server // set by wireSubjects before anything runs
}

func newCluster(cfg bus.Config, rates publishrate.Options, m *metrics.Metrics, log *slog.Logger, mon *pressure.Monitor) (*cluster, error) {
	client, err := redisClient(cfg.URL)
	if err != nil {
		return nil, err
	}
	c := &cluster{client: client}
	rates.Subjects = c.subjects
	rates.LocalSubscribers = func(topic string) int { return c.srv.LocalSubscribers(topic) }
	rates.Metrics = m
	rates.Logger = log
	c.agg, err = publishrate.New(client, mon, rates)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("rtserver: %w", err)
	}
	ropts := bus.RedisOptions{
		Client:        client,
		ChannelPrefix: cfg.ChannelPrefix,
		PublishQueue:  cfg.PublishQueue,
		PublishWait:   cfg.PublishWait,
		InstanceID:    c.agg.InstanceID(),
		Metrics:       m,
		Logger:        log,
		// One fleet secret signs both kinds of envelope: whoever can
		// forge one could forge the other.
		HMACSecret: rates.HMACSecret,
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
