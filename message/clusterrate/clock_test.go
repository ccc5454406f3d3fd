package clusterrate

import (
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/internal/clock"
)

// withClock is opts with the Admission's clock set to now.
func withClock(opts message.Deps, now func() time.Time) message.Deps {
	clock.Set(&opts, now)
	return opts
}

// mustLimiter is New, which must succeed.
func mustLimiter(cfg Config, deps Deps) *Limiter { return testkit.Must(New(cfg, deps)) }
