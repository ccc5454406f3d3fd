package admitgrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admitgrpc"
)

// Guard a gRPC server: every method of the health service is in one
// class, limited to one call per minute per client IP. The client retries
// shed calls whose hint is at most MaxDelay; this one's is a minute, so it
// gets the status at once, with the hint for the caller to act on.
func Example() {
	cfg := message.Config{
		Classes: map[string]message.Rule{"health": {Rate: &message.Rate{Limit: 1, Per: time.Minute, By: "ip"}}},
		Methods: map[string]string{"/grpc.health.v1.Health/*": "health"},
	}
	a, err := message.New(cfg, message.Deps{})
	if err != nil {
		panic(err)
	}
	router, err := message.NewRouter(a, cfg.Methods)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(admitgrpc.UnaryServerInterceptor(router)),
		grpc.ChainStreamInterceptor(admitgrpc.StreamServerInterceptor(router)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(admitgrpc.UnaryClientInterceptor(admitgrpc.MaxDelay(5*time.Second))),
	)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil {
			fmt.Println("OK")
			continue
		}
		st := status.Convert(err)
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				fmt.Println(st.Code(), info.GetReason(), info.GetMetadata()["class"])
			}
		}
		hint, _ := admitgrpc.RetryHint(err)
		fmt.Println("retry in", hint.Round(time.Second))
	}
	// Output:
	// OK
	// ResourceExhausted RATE health
	// retry in 1m0s
}
