package admitgrpc

import (
	"context"
	"time"

	"github.com/rtserver/rtserver/message"
)

// OnReleased calls f from each admitted call's release, with its outcome.
func OnReleased(f func(message.Outcome)) Option {
	return func(c *config) { c.onReleased = f }
}

// Sleep replaces the client interceptor's wait.
func Sleep(f func(context.Context, time.Duration) error) ClientOption {
	return func(c *clientConfig) { c.sleep = f }
}
