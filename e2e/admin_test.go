package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// With adminListen set, /metrics moves to the admin address and is gone
// from the main listener; health endpoints stay on the main one.
func TestAdminListenServesMetricsSeparately(t *testing.T) {
	leakcheck.Check(t)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, fmt.Sprintf("adminListen: %q\n", admin))
	if got := p.status("/metrics"); got != http.StatusNotFound {
		t.Fatalf("main listener /metrics: %d, want 404", got)
	}
	resp, err := httpClient.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /metrics: %d", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := p.status(path); got != http.StatusOK {
			t.Fatalf("%s: %d", path, got)
		}
	}
}
