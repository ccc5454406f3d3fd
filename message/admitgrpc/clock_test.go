package admitgrpc_test

import (
	"time"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/internal/clock"
)

// withClock is opts with the Admission's clock set to now.
func withClock(opts message.Deps, now func() time.Time) message.Deps {
	clock.Set(&opts, now)
	return opts
}
