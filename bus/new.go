package bus

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/metrics"
)

// Deps are what a Redis bus uses beside its redis.* configuration.
type Deps struct {
	// Client reaches Redis: NewClient(cfg), which the node's other Redis
	// parts share. Required; the bus does not close it.
	Client redis.UniversalClient
	// InstanceID tags every envelope this instance publishes; "": a new
	// random id.
	InstanceID string
	// HMACSecret is the fleet's secret (publishRate.hmacSecret): whoever
	// can forge a rate envelope could forge a bus message, so one secret
	// signs both. Empty: unsigned.
	HMACSecret []byte
	// Cluster answers the sharded bus's Subscribers with cluster-wide
	// counts; nil: local counts.
	Cluster SubscriberCounter
	Metrics *metrics.Metrics // nil: metrics.NewDiscard()
	Logger  *slog.Logger     // nil: slog.Default()
}

// New is the Redis bus cfg.Bus names (single or sharded), on deps.Client,
// with cfg's prefix, partitions and publish back-pressure.
func New(cfg Config, deps Deps) (Bus, error) {
	if deps.Client == nil {
		return nil, errors.New("bus: Deps.Client is required")
	}
	o := RedisOptions{
		Client:        deps.Client,
		ChannelPrefix: cfg.ChannelPrefix,
		PublishQueue:  cfg.PublishQueue,
		PublishWait:   cfg.PublishWait,
		InstanceID:    deps.InstanceID,
		Metrics:       deps.Metrics,
		Logger:        deps.Logger,
		HMACSecret:    deps.HMACSecret,
	}
	switch cfg.Bus {
	case "", "single":
		if b, err := NewRedis(o); err == nil {
			return b, nil
		} else {
			return nil, err
		}
	case "sharded":
		if b, err := NewSharded(ShardedOptions{RedisOptions: o, Partitions: cfg.Partitions, Cluster: deps.Cluster}); err == nil {
			return b, nil
		} else {
			return nil, err
		}
	}
	return nil, fmt.Errorf("redis.bus: unknown bus %q (single | sharded)", cfg.Bus)
}
