package rtserver

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/clusterrate"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
	"github.com/rtserver/rtserver/server"
)

// cluster holds the parts that need Redis: the client, the aggregator and
// the limiter of cluster-scoped admission parts. The bus and the
// aggregator share one instance id, so logs and envelopes agree.
//
// bus.NewClient builds the one client from redis.* (one server, a
// primary found through Sentinel, or a Redis Cluster); every part here
// and the bus, history and presence stores share it.
type cluster struct {
	client  redis.UniversalClient
	agg     *publishrate.Aggregator
	limiter *clusterrate.Limiter
	// ceilings shares fleet-wide adaptive concurrency limits; admit (set
	// by Node.build) is exchanged through it while the cluster runs.
	ceilings     *clusterrate.Ceilings
	admit        *message.Admission
	stopCeilings context.CancelFunc
	ceilingsDone chan struct{}
	// scoped: some class has a cluster-scoped part, so the limiter is
	// warmed up at start.
	scoped bool
}

func newCluster(cfg Config, m *metrics.Metrics, log *slog.Logger, mon *pressure.Monitor) (*cluster, error) {
	client, err := bus.NewClient(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("rtserver: %w", err)
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
		client:   client,
		agg:      agg,
		limiter:  clusterrate.New(client, clusterrate.Options{Prefix: cfg.Redis.ChannelPrefix}),
		ceilings: clusterrate.NewCeilings(client, clusterrate.CeilingOptions{Prefix: cfg.Redis.ChannelPrefix, InstanceID: agg.InstanceID()}),
		scoped:   cfg.Admission.ClusterScoped(),
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

// start activates the aggregator (the server starts the bus), handing it
// the server's subscriber counts, and warms up the shared limiter.
func (c *cluster) start(ctx context.Context, srv *server.Server, log *slog.Logger) error {
	err := c.agg.Activate(ctx, publishrate.Sources{
		Subjects: func() []publishrate.SubjectCount {
			local := srv.Subjects()
			out := make([]publishrate.SubjectCount, len(local))
			for i, tc := range local {
				out[i] = publishrate.SubjectCount{Topic: tc.Topic, Count: tc.Count}
			}
			return out
		},
		LocalSubscribers: srv.LocalSubscribers,
	})
	if err != nil {
		return err
	}
	if c.admit != nil && c.admit.HasCeilings() {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c.stopCeilings, c.ceilingsDone = cancel, make(chan struct{})
		go func() {
			defer close(c.ceilingsDone)
			c.admit.RunCeilings(ctx, message.DefaultCeilingEvery)
		}()
	}
	if c.scoped {
		// A cold first cluster-scoped check (dial, cluster slots, script
		// load) can outlast its 100ms timeout and be decided by the fail
		// policy; warm up before taking clients. Best effort.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.limiter.Preload(ctx); err != nil {
			log.Warn("cluster-scoped admission: Redis not ready at start; checks decide by admission.failPolicy until it is", "err", err)
		}
	}
	return nil
}

// stop deactivates the aggregator and closes the client, after the server
// has closed the bus.
func (c *cluster) stop() {
	if c.stopCeilings != nil {
		c.stopCeilings()
		<-c.ceilingsDone
		c.stopCeilings = nil
	}
	c.agg.Deactivate()
	c.client.Close()
}
