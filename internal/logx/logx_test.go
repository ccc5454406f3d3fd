package logx

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRepeatedWarningsAreLimitedWithCounts(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	log := slog.New(Limit(slog.NewTextHandler(&out, nil), 10*time.Second, func() time.Time { return now }))

	for i := range 1000 {
		log.Warn("dropped envelope", "i", i)
	}
	log.Warn("another kind")
	log.Info("info is never limited")
	log.Info("info is never limited")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[0], "i=0") || strings.Contains(lines[0], "suppressed") {
		t.Fatalf("first line %q", lines[0])
	}

	out.Reset()
	now = now.Add(9 * time.Second)
	log.Warn("dropped envelope", "i", 1000)
	if out.Len() != 0 {
		t.Fatalf("written before the interval passed: %q", out.String())
	}
	now = now.Add(time.Second)
	log.With("component", "bus").Warn("dropped envelope", "i", 1001)
	if got := out.String(); !strings.Contains(got, "suppressed=1000") || !strings.Contains(got, "i=1001") || !strings.Contains(got, "component=bus") {
		t.Fatalf("after the interval: %q", got)
	}
}

func TestKeyBound(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(Limit(slog.NewTextHandler(&out, nil), time.Hour, nil))
	for i := range maxKeys + 10 {
		log.Warn(strings.Repeat("x", i%50) + string(rune('a'+i%26)) + time.Duration(i).String())
	}
	// Past the bound messages pass through: nothing is lost, memory holds.
	if n := strings.Count(out.String(), "\n"); n != maxKeys+10 {
		t.Fatalf("%d lines, want %d", n, maxKeys+10)
	}
}

// A library's free-text lines (go-redis during an outage: a line per
// failed dial) become limited, structured warnings.
func TestPrintfLinesAreLimited(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	p := Printf{Logger: slog.New(Limit(slog.NewTextHandler(&out, nil), 10*time.Second, func() time.Time { return now })), Msg: "redis client"}
	for i := range 12 {
		p.Printf(t.Context(), "redis: connection pool: failed to dial after %d attempts: %v\n", i, "connection refused")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `level=WARN msg="redis client" detail="redis: connection pool: failed to dial after 0 attempts: connection refused"`) {
		t.Fatalf("got:\n%s", out.String())
	}
}

func TestRepeatedDebugRecordsAreLimitedInfoIsNot(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	log := slog.New(Limit(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), 10*time.Second, func() time.Time { return now }))
	for range 100 {
		log.Debug("token refused: expired")
	}
	log.Debug("token refused: audience")
	log.Info("info passes")
	log.Info("info passes")
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", n, out.String())
	}
	out.Reset()
	now = now.Add(10 * time.Second)
	log.Debug("token refused: expired")
	if !strings.Contains(out.String(), "suppressed=99") {
		t.Fatalf("after the interval: %q", out.String())
	}
}
