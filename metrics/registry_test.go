package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// A registry that already holds the Go and process collectors (as a
// program's does) takes rtserver's metrics: New registers neither.
func TestNewBesideGoCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := New(reg, ""); err != nil {
		t.Fatalf("New beside the Go collector: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// A second New under the same names is an error, not a panic, and leaves
// the registry as the first one made it; a namespace or a wrapping label
// lets two share it.
func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	before := familyCount(t, reg)

	m, err := New(reg, "")
	var are prometheus.AlreadyRegisteredError
	if m != nil || !errors.As(err, &are) {
		t.Fatalf("second New = %v, %v; want nil and an AlreadyRegisteredError", m, err)
	}
	if got := familyCount(t, reg); got != before {
		t.Fatalf("families after the failed New = %d, want %d", got, before)
	}
	first.HandshakeAccepted.Inc() // the first one's collectors still work

	if _, err := New(reg, "other"); err != nil {
		t.Fatalf("New under another namespace: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gathering the shared registry: %v", err)
	}

	shared := prometheus.NewRegistry()
	for _, node := range []string{"a", "b"} {
		if _, err := New(prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, shared), ""); err != nil {
			t.Fatalf("New under node=%s: %v", node, err)
		}
	}
	if _, err := shared.Gather(); err != nil {
		t.Fatalf("gathering the labelled registry: %v", err)
	}
}

// The failed New unregistered what it had registered: a partial collision
// (one name taken by someone else) leaves nothing of rtserver behind.
func TestNewPartialCollisionCleansUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "bus_degraded", Help: "someone else's"}))
	if _, err := New(reg, ""); err == nil {
		t.Fatal("New over a taken name succeeded")
	}
	if got := familyCount(t, reg); got != 1 {
		t.Fatalf("families after the failed New = %d, want only the other gauge", got)
	}
	if _, err := New(prometheus.NewRegistry(), ""); err != nil {
		t.Fatal(err)
	}
}

func familyCount(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return len(fams)
}
