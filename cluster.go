package rtserver

import (
	"context"
	"errors"
	"log/slog"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/server"
)

// Redis configures the cross-instance parts (CONTRACT section 5, redis.*
// and publishRate.*). An empty URL means a single instance.
type Redis struct {
	URL           string
	Bus           string // single | sharded
	Partitions    int
	ChannelPrefix string

	RateChannel         string
	RatePublishInterval string
	HMACSecret          []byte
}

// DefaultRedis is CONTRACT section 5's redis block.
func DefaultRedis() Redis {
	return Redis{Bus: "single", Partitions: 16, ChannelPrefix: "rt:"}
}

// cluster holds the Redis bus and the aggregator.
type cluster struct {
	bus   bus.Bus
	rates message.RateSource
}

func newCluster(cfg Redis, m *metrics.Metrics, log *slog.Logger, mon *pressure.Monitor) (*cluster, error) {
	return nil, errors.New("rtserver: redis is not wired yet")
}

func (c *cluster) wireSubjects(*server.Server) {}
func (c *cluster) start(context.Context) error { return nil }
func (c *cluster) stop()                       {}
