package rtserver_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/rtserver/rtserver"
)

// The server API on a main listener beyond loopback is allowed (the key
// guards it) but said once at start-up; on loopback, or with adminListen,
// nothing is said.
func TestAPIWarnsBeyondLoopback(t *testing.T) {
	for _, tt := range []struct {
		listen, admin string
		warn          bool
	}{
		{"0.0.0.0:8080", "", true},
		{"10.1.2.3:8080", "", true},
		{"127.0.0.1:8080", "", false},
		{"localhost:8080", "", false},
		{"[::1]:8080", "", false},
		{"0.0.0.0:8080", "127.0.0.1:9090", false},
	} {
		var buf bytes.Buffer
		cfg := rtserver.DefaultConfig()
		cfg.Listen, cfg.AdminListen, cfg.APIKey = tt.listen, tt.admin, "k"
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		if _, err := rtserver.New(cfg); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(buf.String(), "server API is served on the main listener"); got != map[bool]int{true: 1, false: 0}[tt.warn] {
			t.Errorf("listen %s admin %q: %d warnings, want warn=%v\n%s", tt.listen, tt.admin, got, tt.warn, buf.String())
		}
	}
}
