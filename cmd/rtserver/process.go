package main

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/logx"
)

// processWide sets what belongs to the process rather than to a node, so
// the library never does (two nodes in one process would fight over it):
// the registry, with the Go and process collectors beside the node's
// metrics (process_* under metrics.namespace, docs/metrics.md), and
// go-redis's logger.
func processWide(n *rtserver.Config, log *slog.Logger) {
	reg := prometheus.NewRegistry()
	reg.MustRegister( // a program's own fresh registry: nothing to collide with
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: n.MetricsNamespace}),
	)
	n.Registry = reg
	// go-redis writes free text to stderr, a line per failed dial during
	// an outage: route it through the structured log, one line per kind
	// per interval, as the node limits its own.
	limited := slog.New(logx.Limit(log.Handler(), 10*time.Second, nil))
	redis.SetLogger(logx.Printf{Logger: limited, Msg: "redis client"})
}
