package bus

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"
)

// NewClient is the one Redis client of a fleet node, built from c
// (redis.*): the bus, history, presence, the cluster-scoped admission
// limiter and the cluster view all use the client it returns, so every
// part reaches the same Redis the same way. Three topologies, chosen by
// the configuration alone (docs/cluster.md says what each guarantees):
//
//   - one server: redis.url names it (redis://[user:password@]host:port[/db]);
//   - a primary watched by Redis Sentinel: redis.sentinel.addrs lists the
//     Sentinels and redis.url's host is the name they monitor the primary
//     under (redis://:password@mymaster/0). The client asks the Sentinels
//     for the primary, and when they promote a replica it drops its
//     connections and follows, so every part sees a fail-over as a short
//     loss of Redis (degraded), then a Redis that may lack the writes the
//     old primary had not replicated: the same rules as a restarted Redis;
//   - a Redis Cluster: redis.url names one node and each addr query
//     parameter another (redis://host1:6379?addr=host2:6379).
//
// It does no I/O. The caller closes the client.
func NewClient(c Config) (redis.UniversalClient, error) {
	if c.URL == "" {
		return nil, errors.New("bus: redis.url is empty")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("bus: redis.url: %w", err)
	}
	switch {
	case len(c.Sentinel.Addrs) > 0:
		if u.Query().Has("addr") {
			return nil, errors.New("bus: redis.url: addr parameters name Redis Cluster nodes, which redis.sentinel.addrs excludes")
		}
		// The URL's host is the master name, so parse it as if it were a
		// server and take the credentials, database, TLS and tuning
		// parameters from there.
		o, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("bus: redis.url: %w", err)
		}
		fo := &redis.FailoverOptions{
			MasterName:       u.Hostname(),
			SentinelAddrs:    c.Sentinel.Addrs,
			SentinelPassword: c.Sentinel.Password,
			Username:         o.Username,
			Password:         o.Password,
			DB:               o.DB,
			TLSConfig:        o.TLSConfig,
			ClientName:       o.ClientName,
			Protocol:         o.Protocol,
			MaxRetries:       o.MaxRetries,
			MinRetryBackoff:  o.MinRetryBackoff,
			MaxRetryBackoff:  o.MaxRetryBackoff,
			DialTimeout:      o.DialTimeout,
			ReadTimeout:      o.ReadTimeout,
			WriteTimeout:     o.WriteTimeout,
			PoolSize:         o.PoolSize,
			PoolTimeout:      o.PoolTimeout,
			MinIdleConns:     o.MinIdleConns,
			MaxIdleConns:     o.MaxIdleConns,
			ConnMaxIdleTime:  o.ConnMaxIdleTime,
			ConnMaxLifetime:  o.ConnMaxLifetime,
		}
		if fo.TLSConfig != nil {
			// ParseURL named the master as the TLS server; the servers
			// the Sentinels name are checked against their own addresses.
			fo.TLSConfig.ServerName = ""
		}
		return redis.NewFailoverClient(fo), nil
	case u.Query().Has("addr"):
		opts, err := redis.ParseClusterURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("bus: redis.url: %w", err)
		}
		return redis.NewClusterClient(opts), nil
	default:
		opts, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("bus: redis.url: %w", err)
		}
		return redis.NewClient(opts), nil
	}
}
