package rtserver_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

// An embedder's registry is the embedder's: a node never panics on it.
// Beside the Go collector a node registers cleanly (it registers no
// process-wide collector itself); a second node under the same names is a
// clean error; under another namespace the two share the registry.
func TestNodesShareARegistryWithoutPanic(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	cfg := quietConfig()
	deps := rtserver.Deps{Registry: reg, Logger: quiet.Logger}
	if _, err := rtserver.New(cfg, deps); err != nil {
		t.Fatalf("a node beside the Go collector: %v", err)
	}

	_, err := rtserver.New(cfg, deps)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("a second node under the same names: %v, want an AlreadyRegisteredError", err)
	}

	cfg.Metrics.Namespace = "second"
	if _, err := rtserver.New(cfg, deps); err != nil {
		t.Fatalf("a second node under its own namespace: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}
