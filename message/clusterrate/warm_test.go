package clusterrate

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// Start warms the limiter up (the script is on Redis); with Redis down it
// returns within its ctx and keeps trying in the background until Redis
// is back. Close ends a warm-up still trying, and is safe twice and on a
// limiter that never started.
func TestStartWarmsUpInTheBackground(t *testing.T) {
	leakcheck.Check(t)
	s := redistest.Start(t)
	c := client(t, s)
	loaded := func() bool {
		ok, err := c.ScriptExists(context.Background(), gcraScript.Hash()).Result()
		return err == nil && len(ok) == 1 && ok[0]
	}
	deps := Deps{Client: c, Logger: slog.New(slog.DiscardHandler)}
	s.Stop()
	start := func(l *Limiter) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if err := l.Start(ctx); err != nil {
			t.Fatalf("Start with Redis down = %v, want nil: checks work without a warm-up", err)
		}
	}

	closed := mustLimiter(Config{}, deps)
	start(closed)
	closed.Close() // while it retries
	closed.Close()
	mustLimiter(Config{}, deps).Close() // never started

	l := mustLimiter(Config{}, deps)
	start(l)
	s.Restart() // empty: no script
	testkit.Eventually(t, 20*time.Second, "the script loaded once Redis is back", loaded)
	l.Close()
}
