package admitgrpc

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientOption configures UnaryClientInterceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	maxRetries int
	maxDelay   time.Duration
	sleep      func(context.Context, time.Duration) error // tests inject a clock
}

// Defaults of the client interceptor.
const (
	DefaultMaxRetries = 3
	DefaultMaxDelay   = 10 * time.Second
)

// MaxRetries bounds the retries of one call (DefaultMaxRetries when not
// given; 0 turns retrying off).
func MaxRetries(n int) ClientOption {
	return func(c *clientConfig) { c.maxRetries = max(n, 0) }
}

// MaxDelay is the longest hint worth waiting for (DefaultMaxDelay when not
// given): a call told to come back later fails at once with the server's
// status, which carries the hint for the caller to act on.
func MaxDelay(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.maxDelay = d }
}

// UnaryClientInterceptor retries a unary call that the server's admission
// shed: status Unavailable or ResourceExhausted carrying google.rpc.RetryInfo
// (as UnaryServerInterceptor and StreamServerInterceptor answer). It waits
// the hinted delay plus up to half of it again (jitter, so a shed crowd
// spreads out), at most MaxRetries times. A shed call never ran, so this is
// safe for any method. It gives up, returning the last status, when the
// hint is longer than MaxDelay or would outlast the call's deadline; if
// the call's context ends while waiting it returns the context's status.
// Any other error is returned as is: retrying failures in general is the
// job of gRPC's own retry policy.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	cfg := clientConfig{maxRetries: DefaultMaxRetries, maxDelay: DefaultMaxDelay, sleep: sleep}
	for _, o := range opts {
		o(&cfg)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for attempt := 0; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil || attempt >= cfg.maxRetries {
				return err
			}
			hint, ok := RetryHint(err)
			if !ok || hint > cfg.maxDelay {
				return err
			}
			wait := hint + rand.N(hint/2+1)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				return err
			}
			if werr := cfg.sleep(ctx, wait); werr != nil {
				return status.FromContextError(werr).Err()
			}
		}
	}
}

// RetryHint returns the delay a shed call's status asks for: the
// google.rpc.RetryInfo of an Unavailable or ResourceExhausted status, if
// positive. ok is false for any other error.
func RetryHint(err error) (d time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return 0, false
	}
	if c := st.Code(); c != codes.Unavailable && c != codes.ResourceExhausted {
		return 0, false
	}
	for _, det := range st.Details() {
		if ri, isRI := det.(*errdetails.RetryInfo); isRI && ri.GetRetryDelay() != nil {
			if d := ri.GetRetryDelay().AsDuration(); d > 0 {
				return d, true
			}
		}
	}
	return 0, false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
