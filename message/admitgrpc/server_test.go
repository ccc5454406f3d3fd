package admitgrpc_test

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admitgrpc"
)

// shedDetails checks a shed status's code and details and returns its
// retry hint.
func shedDetails(t *testing.T, err error, code codes.Code, reason, class string) time.Duration {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("status %v, want %v", st, code)
	}
	var ri *errdetails.RetryInfo
	var ei *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.ErrorInfo:
			ei = d
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() < time.Millisecond {
		t.Fatalf("RetryInfo %v: want a positive delay", ri)
	}
	if ri.GetRetryDelay().AsDuration()%time.Millisecond != 0 {
		t.Errorf("RetryInfo %v: want whole milliseconds", ri.GetRetryDelay().AsDuration())
	}
	if ei == nil || ei.GetReason() != reason || ei.GetDomain() != admitgrpc.ErrorDomain || ei.GetMetadata()["class"] != class {
		t.Fatalf("ErrorInfo %v: want reason %s, domain %s, class %s", ei, reason, admitgrpc.ErrorDomain, class)
	}
	hint, ok := admitgrpc.RetryHint(err)
	if !ok || hint != ri.GetRetryDelay().AsDuration() {
		t.Errorf("RetryHint = %v, %v", hint, ok)
	}
	return hint
}

// TestShedCallsOverTheNetwork: a real server and client. A rate class
// sheds with ResourceExhausted and the limiter's wait; a concurrency class
// (reached through a glob) sheds unary calls and streams with Unavailable
// while a stream holds its one slot, and admits again once that stream
// ends; a method mapped to no class always runs.
func TestShedCallsOverTheNetwork(t *testing.T) {
	leakcheck.Check(t)
	a, r := newRouter(t, message.Deps{}, map[string]message.Rule{
		"probe": {Rate: &message.Rate{Limit: 1, Per: time.Minute, By: "ip"}},
		"watch": {Concurrency: &message.Concurrency{Max: 1}},
	}, map[string]string{
		methodCheck:                 "probe",
		"/grpc.health.v1.Health/W*": "watch",
	})
	watch, _ := a.Class("watch")
	var released []message.Outcome
	hook := admitgrpc.OnReleased(func(o message.Outcome) { released = append(released, o) })
	s := startServer(t)
	s.set(admitgrpc.UnaryServerInterceptor(r, hook), admitgrpc.StreamServerInterceptor(r, hook))
	cl := s.dial(t)
	ctx := t.Context()

	if _, err := cl.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Check(ctx, &healthpb.HealthCheckRequest{})
	if hint := shedDetails(t, err, codes.ResourceExhausted, message.ReasonRate, "probe"); hint < 59*time.Second {
		t.Errorf("rate hint %v, want about a minute", hint)
	}

	wctx, c := s.controlled(ctx)
	stream, err := cl.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-c.entered
	if n := watch.InFlight(); n != 1 {
		t.Fatalf("in flight %d while the stream runs", n)
	}
	shedStream, err := cl.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = shedStream.Recv()
	}
	shedDetails(t, err, codes.Unavailable, message.ReasonConcurrency, "watch")
	for range 3 {
		if _, err := cl.List(ctx, &healthpb.HealthListRequest{}); err != nil {
			t.Fatalf("unmapped method: %v", err)
		}
	}

	c.act <- actReturn
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	<-c.finished
	if n := watch.InFlight(); n != 0 {
		t.Fatalf("in flight %d after the stream ended", n)
	}
	if len(released) != 2 || released[0] != message.Completed || released[1] != message.Completed {
		t.Errorf("releases %v, want the Check's and the stream's, both completed", released)
	}
	stream, err = cl.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("a stream after the slot came back: %v", err)
	}
}

// TestPanicReleasesThenPanics: the lease is back before the panic reaches
// the interceptor outside ours, and the call is released as Dropped.
func TestPanicReleasesThenPanics(t *testing.T) {
	a, r := newRouter(t, message.Deps{}, map[string]message.Rule{"c": {Concurrency: &message.Concurrency{Max: 1}}},
		map[string]string{methodCheck: "c"})
	c, _ := a.Class("c")
	var outcome []message.Outcome
	var inFlightAtRecover int64 = -1
	u := admitgrpc.UnaryServerInterceptor(r, admitgrpc.OnReleased(func(o message.Outcome) { outcome = append(outcome, o) }))
	recoverer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				inFlightAtRecover = c.InFlight()
				err = status.Errorf(codes.Internal, "%v", p)
			}
		}()
		return h(ctx, req)
	}
	s := startServer(t)
	s.set(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return recoverer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return u(ctx, req, info, h) })
	}, nil)
	cctx, ctl := s.controlled(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := s.dial(t).Check(cctx, &healthpb.HealthCheckRequest{})
		errc <- err
	}()
	<-ctl.entered
	ctl.act <- actPanic
	if err := <-errc; status.Code(err) != codes.Internal {
		t.Fatalf("client got %v, want the recoverer's Internal", err)
	}
	if inFlightAtRecover != 0 {
		t.Errorf("in flight %d when the panic reached the recoverer, want 0", inFlightAtRecover)
	}
	if len(outcome) != 1 || outcome[0] != message.Dropped {
		t.Errorf("outcomes %v, want [dropped]", outcome)
	}
}

// TestKeys: by default the peer's IP is the key (all calls from this test
// share it); Key gives each caller its own budget; behind a trusted proxy
// the forwarded client is the key.
func TestKeys(t *testing.T) {
	tests := []struct {
		name     string
		opts     []admitgrpc.Option
		md       [2][]string
		wantShed bool
	}{
		{name: "peer IP", wantShed: true},
		{name: "forged x-forwarded-for ignored", md: [2][]string{{"x-forwarded-for", "198.51.100.1"}, {"x-forwarded-for", "198.51.100.2"}}, wantShed: true},
		{name: "trusted proxy", opts: []admitgrpc.Option{admitgrpc.TrustedProxies(netipPrefix("127.0.0.0/8"))}, md: [2][]string{{"x-forwarded-for", "198.51.100.1"}, {"x-forwarded-for", "198.51.100.2"}}},
		{name: "key", opts: []admitgrpc.Option{admitgrpc.Key(userOf)}, md: [2][]string{{"x-user", "ann"}, {"x-user", "bob"}}},
		{name: "same key", opts: []admitgrpc.Option{admitgrpc.Key(userOf)}, md: [2][]string{{"x-user", "ann"}, {"x-user", "ann"}}, wantShed: true},
	}
	s := startServer(t)
	cl := s.dial(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, r := newRouter(t, message.Deps{}, map[string]message.Rule{"c": {Rate: &message.Rate{Limit: 1, Per: time.Hour}}},
				map[string]string{methodCheck: "c"})
			s.set(admitgrpc.UnaryServerInterceptor(r, tt.opts...), nil)
			var codesGot [2]codes.Code
			for i := range 2 {
				ctx := t.Context()
				if tt.md[i] != nil {
					ctx = metadataCtx(ctx, tt.md[i]...)
				}
				_, err := cl.Check(ctx, &healthpb.HealthCheckRequest{})
				codesGot[i] = status.Code(err)
			}
			want := [2]codes.Code{codes.OK, codes.OK}
			if tt.wantShed {
				want[1] = codes.ResourceExhausted
			}
			if codesGot != want {
				t.Errorf("codes %v, want %v", codesGot, want)
			}
		})
	}
}

// TestCostParts: a unary call's Bytes is its request's encoded size, and
// Describe can price it by a param; a cost denial is ResourceExhausted
// with reason COST.
func TestCostParts(t *testing.T) {
	req := &healthpb.HealthCheckRequest{Service: "0123456789012345678901234567"} // 30 bytes encoded
	tests := []struct {
		name string
		cost message.Cost
		opts []admitgrpc.Option
	}{
		{name: "bytes", cost: message.Cost{Budget: 40, Per: time.Hour, Of: "bytes", By: "ip"}},
		{name: "param via Describe", cost: message.Cost{Budget: 40, Per: time.Hour, Of: "param:chars", By: "ip"},
			opts: []admitgrpc.Option{admitgrpc.Describe(func(ctx context.Context, req any, c *message.Call) {
				n := len(req.(*healthpb.HealthCheckRequest).GetService())
				c.Params = []byte(`{"chars":` + strconv.Itoa(n) + `}`)
			})}},
	}
	s := startServer(t)
	cl := s.dial(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, r := newRouter(t, message.Deps{}, map[string]message.Rule{"c": {Cost: &tt.cost}}, map[string]string{methodCheck: "c"})
			s.set(admitgrpc.UnaryServerInterceptor(r, tt.opts...), nil)
			if _, err := cl.Check(t.Context(), req); err != nil {
				t.Fatalf("first call: %v", err)
			}
			_, err := cl.Check(t.Context(), req)
			shedDetails(t, err, codes.ResourceExhausted, message.ReasonCost, "c")
		})
	}
}

// ctxStream is a grpc.ServerStream that only has a context, for calling
// the stream interceptor directly.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// TestDropOnCodes: a handler error with a listed code is released as
// Dropped; other errors, and every error without the option, as Completed.
func TestDropOnCodes(t *testing.T) {
	drop := admitgrpc.DropOnCodes(codes.Unavailable, codes.Internal)
	tests := []struct {
		name   string
		opts   []admitgrpc.Option
		err    error
		stream bool
		want   message.Outcome
	}{
		{name: "ok", opts: []admitgrpc.Option{drop}, want: message.Completed},
		{name: "NotFound is a completion", opts: []admitgrpc.Option{drop}, err: status.Error(codes.NotFound, "x"), want: message.Completed},
		{name: "Unavailable listed", opts: []admitgrpc.Option{drop}, err: status.Error(codes.Unavailable, "x"), want: message.Dropped},
		{name: "Unavailable without the option", err: status.Error(codes.Unavailable, "x"), want: message.Completed},
		{name: "stream Internal listed", opts: []admitgrpc.Option{drop}, err: status.Error(codes.Internal, "x"), stream: true, want: message.Dropped},
		{name: "stream ok", opts: []admitgrpc.Option{drop}, stream: true, want: message.Completed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, r := newRouter(t, message.Deps{}, map[string]message.Rule{"c": {Concurrency: &message.Concurrency{Max: 1}}},
				map[string]string{"/s/*": "c"})
			c, _ := a.Class("c")
			var got []message.Outcome
			opts := append(tt.opts, admitgrpc.OnReleased(func(o message.Outcome) { got = append(got, o) }))
			var err error
			if tt.stream {
				err = admitgrpc.StreamServerInterceptor(r, opts...)(nil, ctxStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: "/s/M"},
					func(any, grpc.ServerStream) error { return tt.err })
			} else {
				_, err = admitgrpc.UnaryServerInterceptor(r, opts...)(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"},
					func(context.Context, any) (any, error) { return nil, tt.err })
			}
			if err != tt.err {
				t.Errorf("returned %v, want the handler's %v", err, tt.err)
			}
			if len(got) != 1 || got[0] != tt.want || c.InFlight() != 0 {
				t.Errorf("outcomes %v, in flight %d; want [%v], 0", got, c.InFlight(), tt.want)
			}
		})
	}
}
