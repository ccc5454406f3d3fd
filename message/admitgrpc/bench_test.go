package admitgrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admitgrpc"
)

// The budget (docs/admission.md, BENCHMARKS.md): the unary interceptor
// costs at most 400 ns per call over calling the handler directly.
// Compare BenchmarkGRPC/direct with the others of the same run.
//
//	go test -run '^$' -bench BenchmarkGRPC -benchmem -count=5 ./message/admitgrpc
func BenchmarkGRPC(b *testing.B) {
	resp := &healthpb.HealthCheckResponse{}
	handler := func(ctx context.Context, req any) (any, error) { return resp, nil }
	req := &healthpb.HealthCheckRequest{Service: "svc"}
	info := &grpc.UnaryServerInfo{FullMethod: methodCheck}
	// A context as the server gives it: a peer, and cancellable.
	ctx, cancel := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 50000},
	}))
	defer cancel()
	rule := message.Rule{
		Rate:        &message.Rate{Limit: 1 << 30, Per: 1 << 40},
		Concurrency: &message.Concurrency{Max: 1 << 20},
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, req)
		}
	})
	for _, bc := range []struct {
		name    string
		methods map[string]string
		rule    message.Rule
	}{
		{"unmapped", map[string]string{"/other/Method": "c"}, rule},
		{"concurrency", map[string]string{methodCheck: "c"}, message.Rule{Concurrency: &message.Concurrency{Max: 1 << 20}}},
		{"rate+concurrency", map[string]string{methodCheck: "c"}, rule},
		{"rate+concurrency/glob", map[string]string{"/grpc.health.v1.Health/*": "c"}, rule},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, r := newRouter(b, message.Deps{}, map[string]message.Rule{"c": bc.rule}, bc.methods)
			u := admitgrpc.UnaryServerInterceptor(r)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := u(ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("checkOnly/rate+concurrency", func(b *testing.B) {
		a, _ := newRouter(b, message.Deps{}, map[string]message.Rule{"c": rule}, nil)
		c, _ := a.Class("c")
		call := &message.Call{IP: "192.0.2.1"}
		b.ReportAllocs()
		for b.Loop() {
			c.Check(call)
			call.Release()
		}
	})
}
