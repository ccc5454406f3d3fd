package admitgrpc

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/rtserver/rtserver/internal/ctxsleep"
	"github.com/rtserver/rtserver/internal/retryhint"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ClientOption configures UnaryClientInterceptor and
// StreamClientInterceptor.
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
	cfg := newClientConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for attempt := 0; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil {
				return nil
			}
			if err := cfg.backoff(ctx, attempt, err); err != nil {
				return err
			}
		}
	}
}

// StreamClientInterceptor retries a server-streaming call that the
// server's admission shed, by the rules of UnaryClientInterceptor. A shed
// stream fails at its first receive, before any message: the interceptor
// then waits, opens a new stream, sends the same request again and
// receives from that one. Once a message has arrived, errors are returned
// as they are. Client-streaming and bidirectional calls are not retried
// (their messages would have to be kept to be sent again).
func StreamClientInterceptor(opts ...ClientOption) grpc.StreamClientInterceptor {
	cfg := newClientConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || desc.ClientStreams || cfg.maxRetries == 0 {
			return cs, err
		}
		return &retryStream{cur: cs, ctx: ctx, cfg: &cfg, open: func() (grpc.ClientStream, error) {
			return streamer(ctx, desc, cc, method, opts...)
		}}, nil
	}
}

// retryStream is a server-streaming call that may be reopened until its
// first message arrives.
type retryStream struct {
	ctx  context.Context
	cfg  *clientConfig
	open func() (grpc.ClientStream, error)

	mu       sync.Mutex
	cur      grpc.ClientStream // the current attempt's stream
	req      any               // the one request message, to send again
	closed   bool              // CloseSend was called
	received bool              // a message arrived: no more retries
	attempt  int
}

func (s *retryStream) stream() grpc.ClientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *retryStream) Header() (metadata.MD, error) { return s.stream().Header() }
func (s *retryStream) Trailer() metadata.MD         { return s.stream().Trailer() }
func (s *retryStream) Context() context.Context     { return s.stream().Context() }

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	s.req = m
	cur := s.cur
	s.mu.Unlock()
	return cur.SendMsg(m)
}

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	s.closed = true
	cur := s.cur
	s.mu.Unlock()
	return cur.CloseSend()
}

func (s *retryStream) RecvMsg(m any) error {
	for {
		cur := s.stream()
		err := cur.RecvMsg(m)
		if err == nil {
			s.mu.Lock()
			s.received = true
			s.mu.Unlock()
			return nil
		}
		s.mu.Lock()
		received, attempt := s.received, s.attempt
		s.mu.Unlock()
		if received || err == io.EOF {
			return err
		}
		if err := s.cfg.backoff(s.ctx, attempt, err); err != nil {
			return err
		}
		next, err := s.open()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.cur, s.attempt = next, attempt+1
		req, closed := s.req, s.closed
		s.mu.Unlock()
		if req != nil {
			if err := next.SendMsg(req); err != nil && err != io.EOF {
				return err
			}
		}
		if closed {
			if err := next.CloseSend(); err != nil {
				return err
			}
		}
	}
}

func newClientConfig(opts []ClientOption) clientConfig {
	cfg := clientConfig{maxRetries: DefaultMaxRetries, maxDelay: DefaultMaxDelay, sleep: ctxsleep.Sleep}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// backoff decides retry number attempt+1 of a call that failed with err:
// nil after waiting (retry now), or the error to end the call with.
func (c *clientConfig) backoff(ctx context.Context, attempt int, err error) error {
	if attempt >= c.maxRetries {
		return err
	}
	hint, ok := RetryHint(err)
	if !ok || hint > c.maxDelay {
		return err
	}
	wait := retryhint.Jitter(hint, hint/2+1)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		return err
	}
	if werr := c.sleep(ctx, wait); werr != nil {
		return status.FromContextError(werr).Err()
	}
	return nil
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
