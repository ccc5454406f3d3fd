// Package ctxsleep waits for a duration or a context's end, whichever
// comes first: the one wait the client's backoff, the gRPC retry
// interceptor and rtbench share.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends (then it returns ctx.Err()). A d of
// zero or less returns at once with ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
