// Package metrics defines every Prometheus metric rtserver exports
// (listed in docs/metrics.md), on a registry that the caller passes in.
//
// It owns the names, types and labels; the other packages take a *Metrics
// and update its fields. It never touches the global default registry, so
// several servers (and tests) live in one process without collisions.
//
// Label values that come from clients (topics) appear only through the
// top-N gauges, whose label sets are replaced wholesale by SetTopN, so the
// number of series stays bounded by topN.
package metrics
