package admitgrpc_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admitgrpc"
)

// sleeper is the client's sleep on the server's admission clock: a
// retry's wait moves time on, so the rate limiter refills without the test
// sleeping.
type sleeper struct {
	clock *testkit.Clock
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	s.clock.Advance(d)
	return ctx.Err()
}

func (s *sleeper) slept() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// countAttempts counts the calls the retry interceptor makes (it sits
// inside it in the client's chain).
func countAttempts(n *int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		*n++
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// TestClientRetriesAfterTheHint: a call shed by a rate part is retried
// once, after at least the server's hint and at most 1.5× it, and then
// succeeds because the limiter has refilled.
func TestClientRetriesAfterTheHint(t *testing.T) {
	clock := &sleeper{clock: testkit.NewClock(time.Unix(1_800_000_000, 0))}
	_, r := newRouter(t, withClock(message.Deps{}, clock.clock.Now),
		map[string]message.Rule{"c": {Rate: &message.Rate{Limit: 1, Per: 2 * time.Second}}},
		map[string]string{methodCheck: "c"})
	s := startServer(t)
	s.set(admitgrpc.UnaryServerInterceptor(r), nil)
	attempts := 0
	cl := s.dial(t, grpc.WithChainUnaryInterceptor(admitgrpc.UnaryClientInterceptor(admitgrpc.Sleep(clock.sleep)), countAttempts(&attempts)))

	for i := range 2 {
		if _, err := cl.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	waits := clock.slept()
	if attempts != 3 || len(waits) != 1 {
		t.Fatalf("%d attempts, waits %v; want 3 attempts (the second call retried once)", attempts, waits)
	}
	if waits[0] < 2*time.Second || waits[0] > 3*time.Second {
		t.Errorf("waited %v, want within [hint, 1.5 hint] of the 2s hint", waits[0])
	}
}

// TestClientGivesUp: retries are bounded; hints beyond MaxDelay or the
// deadline are not waited for; errors without RetryInfo are not retried;
// a context that ends while waiting ends the call with its own status.
func TestClientGivesUp(t *testing.T) {
	// A one-hour base: hints in [30m, 90m), far beyond any round trip, so
	// a one-minute deadline is certainly shorter than the hint.
	a, r := newRouter(t, message.Deps{RetryAfter: time.Hour},
		map[string]message.Rule{"c": {Concurrency: &message.Concurrency{Max: 1}}},
		map[string]string{methodCheck: "c"})
	class, _ := a.Class("c")
	s := startServer(t)
	s.set(admitgrpc.UnaryServerInterceptor(r), nil)
	// Hold the one slot for the whole test with a controlled call.
	hctx, hold := s.controlled(t.Context())
	held := make(chan error, 1)
	go func() {
		_, err := s.dial(t).Check(hctx, &healthpb.HealthCheckRequest{})
		held <- err
	}()
	<-hold.entered
	defer func() {
		hold.act <- actReturn
		if err := <-held; err != nil {
			t.Errorf("holding call: %v", err)
		}
		if n := class.InFlight(); n != 0 {
			t.Errorf("in flight %d at the end", n)
		}
	}()

	long := admitgrpc.MaxDelay(2 * time.Hour)
	tests := []struct {
		name         string
		opts         []admitgrpc.ClientOption
		deadline     time.Duration
		sleepErr     error
		wantAttempts int
		wantCode     codes.Code
	}{
		{name: "default bound", opts: []admitgrpc.ClientOption{long}, wantAttempts: 1 + admitgrpc.DefaultMaxRetries, wantCode: codes.Unavailable},
		{name: "MaxRetries 1", opts: []admitgrpc.ClientOption{long, admitgrpc.MaxRetries(1)}, wantAttempts: 2, wantCode: codes.Unavailable},
		{name: "MaxRetries 0 turns retrying off", opts: []admitgrpc.ClientOption{long, admitgrpc.MaxRetries(0)}, wantAttempts: 1, wantCode: codes.Unavailable},
		{name: "hint over the default MaxDelay", wantAttempts: 1, wantCode: codes.Unavailable},
		{name: "hint past the deadline", opts: []admitgrpc.ClientOption{long}, deadline: time.Minute, wantAttempts: 1, wantCode: codes.Unavailable},
		{name: "context ends while waiting", opts: []admitgrpc.ClientOption{long}, sleepErr: context.Canceled, wantAttempts: 1, wantCode: codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var waits []time.Duration
			sleep := func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d)
				return tt.sleepErr
			}
			attempts := 0
			opts := append(tt.opts, admitgrpc.Sleep(sleep))
			cl := s.dial(t, grpc.WithChainUnaryInterceptor(admitgrpc.UnaryClientInterceptor(opts...), countAttempts(&attempts)))
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			_, err := cl.Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != tt.wantCode || attempts != tt.wantAttempts {
				t.Fatalf("%v after %d attempts; want %v after %d", err, attempts, tt.wantCode, tt.wantAttempts)
			}
			for _, w := range waits {
				if w < 30*time.Minute || w > 135*time.Minute {
					t.Errorf("waited %v: want within [hint, 1.5 hint], hints in [30m, 90m)", w)
				}
			}
		})
	}

	t.Run("not shed by admission", func(t *testing.T) {
		attempts := 0
		notFound := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			attempts++
			return status.Error(codes.Unavailable, "no RetryInfo")
		}
		err := admitgrpc.UnaryClientInterceptor(admitgrpc.Sleep(func(context.Context, time.Duration) error {
			t.Error("slept for an error without RetryInfo")
			return nil
		}))(t.Context(), methodCheck, nil, nil, nil, notFound)
		if attempts != 1 || status.Code(err) != codes.Unavailable {
			t.Errorf("%v after %d attempts", err, attempts)
		}
		if _, ok := admitgrpc.RetryHint(errors.New("plain")); ok {
			t.Error("RetryHint of a plain error")
		}
	})
}

// TestStreamClientRetries: a server stream shed by a concurrency part is
// reopened after the hint (the wait here ends the call that held the
// slot), the request is sent again, and the caller sees only the retried
// stream's end; with no retries left it sees the shed status.
func TestStreamClientRetries(t *testing.T) {
	a, r := newRouter(t, message.Deps{RetryAfter: time.Hour},
		map[string]message.Rule{"c": {Concurrency: &message.Concurrency{Max: 1}}},
		map[string]string{methodWatch: "c"})
	class, _ := a.Class("c")
	s := startServer(t)
	s.set(nil, admitgrpc.StreamServerInterceptor(r))

	for _, retries := range []int{1, 0} {
		hctx, hold := s.controlled(t.Context())
		held, err := s.dial(t).Watch(hctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		<-hold.entered
		var waits []time.Duration
		release := func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			hold.act <- actReturn
			<-hold.finished
			return nil
		}
		cl := s.dial(t, grpc.WithChainStreamInterceptor(admitgrpc.StreamClientInterceptor(
			admitgrpc.MaxDelay(2*time.Hour), admitgrpc.MaxRetries(retries), admitgrpc.Sleep(release))))
		stream, err := cl.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "again"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if retries == 1 {
			if err != io.EOF || len(waits) != 1 || waits[0] < 30*time.Minute {
				t.Fatalf("retried stream: %v after waits %v; want EOF after one wait of at least the hint", err, waits)
			}
		} else {
			if status.Code(err) != codes.Unavailable || len(waits) != 0 {
				t.Fatalf("no retries: %v after waits %v; want Unavailable at once", err, waits)
			}
			hold.act <- actReturn
			<-hold.finished
		}
		if _, err := held.Recv(); err != io.EOF {
			t.Fatalf("holding stream: %v", err)
		}
		if n := class.InFlight(); n != 0 {
			t.Fatalf("in flight %d", n)
		}
	}
}
