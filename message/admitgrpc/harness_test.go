package admitgrpc_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
)

// The test service is gRPC's own health service (no code generation):
// Check and List are unary, Watch is a server stream. A call that carries
// an "x-id" metadata value is controlled by the test through its ctl: the
// handler announces itself, then returns or panics when told to, and
// reports when its context ends.
const (
	methodCheck = "/grpc.health.v1.Health/Check"
	methodList  = "/grpc.health.v1.Health/List"
	methodWatch = "/grpc.health.v1.Health/Watch"
)

type action int

const (
	actReturn action = iota
	actPanic
)

type ctl struct {
	entered  chan struct{} // the handler runs
	act      chan action
	gone     chan struct{} // the handler saw its context end
	finished chan struct{} // the whole interceptor chain returned (admitted or shed)
}

func newCtl() *ctl {
	return &ctl{entered: make(chan struct{}), act: make(chan action), gone: make(chan struct{}), finished: make(chan struct{})}
}

// errPanicked is what the outer interceptor turns a handler panic into.
var errPanicked = status.Error(codes.Internal, "handler panicked")

type testServer struct {
	healthpb.UnimplementedHealthServer

	mu   sync.Mutex
	ctls map[string]*ctl
	next atomic.Int64

	// unary and stream are the interceptors under test, swappable so one
	// server serves many property-test runs.
	unary  atomic.Pointer[grpc.UnaryServerInterceptor]
	stream atomic.Pointer[grpc.StreamServerInterceptor]

	addr string
}

// startServer serves the health service on a loopback port with the outer
// test interceptor (recover, then signal) around the swappable ones.
func startServer(t testing.TB, opts ...grpc.ServerOption) *testServer {
	t.Helper()
	s := &testServer{ctls: map[string]*ctl{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	opts = append(opts,
		grpc.ChainUnaryInterceptor(s.outerUnary, s.innerUnary),
		grpc.ChainStreamInterceptor(s.outerStream, s.innerStream),
	)
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return s
}

func (s *testServer) set(u grpc.UnaryServerInterceptor, st grpc.StreamServerInterceptor) {
	s.unary.Store(&u)
	s.stream.Store(&st)
}

// dial returns a client of s; the connection is closed at cleanup.
func (s *testServer) dial(t testing.TB, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///"+s.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// controlled returns a context for a controlled call and its ctl.
func (s *testServer) controlled(ctx context.Context) (context.Context, *ctl) {
	id := strconv.FormatInt(s.next.Add(1), 10)
	c := newCtl()
	s.mu.Lock()
	s.ctls[id] = c
	s.mu.Unlock()
	return metadata.AppendToOutgoingContext(ctx, "x-id", id), c
}

func (s *testServer) ctlOf(ctx context.Context) *ctl {
	v := metadata.ValueFromIncomingContext(ctx, "x-id")
	if len(v) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctls[v[0]]
}

func (s *testServer) outerUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	c := s.ctlOf(ctx)
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, errPanicked
		}
		if c != nil {
			close(c.finished)
		}
	}()
	return h(ctx, req)
}

func (s *testServer) innerUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if u := s.unary.Load(); u != nil && *u != nil {
		return (*u)(ctx, req, info, h)
	}
	return h(ctx, req)
}

func (s *testServer) outerStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	c := s.ctlOf(ss.Context())
	defer func() {
		if p := recover(); p != nil {
			err = errPanicked
		}
		if c != nil {
			close(c.finished)
		}
	}()
	return h(srv, ss)
}

func (s *testServer) innerStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if st := s.stream.Load(); st != nil && *st != nil {
		return (*st)(srv, ss, info, h)
	}
	return h(srv, ss)
}

// block runs a controlled handler: announce, then obey.
func (s *testServer) block(ctx context.Context) {
	c := s.ctlOf(ctx)
	if c == nil {
		return
	}
	close(c.entered)
	done := ctx.Done()
	for {
		select {
		case a := <-c.act:
			if a == actPanic {
				panic("test handler panics")
			}
			return
		case <-done:
			close(c.gone)
			done = nil
		}
	}
}

func (s *testServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.block(ctx)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *testServer) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	s.block(ctx)
	return &healthpb.HealthListResponse{}, nil
}

func (s *testServer) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	s.block(ss.Context())
	return nil
}

// newRouter registers classes and maps methods to them.
func newRouter(t testing.TB, opts message.Deps, classes map[string]message.Rule, methods map[string]string) (*message.Admission, *message.Router) {
	t.Helper()
	a := testkit.Must(message.New(message.Config{}, opts))
	for name, r := range classes {
		if err := a.Register(name, r); err != nil {
			t.Fatal(err)
		}
	}
	r, err := message.NewRouter(a, methods)
	if err != nil {
		t.Fatal(err)
	}
	return a, r
}

// isCanceled reports a client-side cancellation.
func isCanceled(err error) bool {
	return status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled)
}
