package admitgrpc_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admitgrpc"
)

// TestDecisionOnSpan: with a span in the call's context (as otelgrpc puts
// there), the decision is recorded on it, admitted and shed alike.
func TestDecisionOnSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, r := newRouter(t, message.Deps{}, map[string]message.Rule{"probe": {Rate: &message.Rate{Limit: 1, Per: time.Minute}}},
		map[string]string{methodCheck: "probe"})
	u := admitgrpc.UnaryServerInterceptor(r)
	s := startServer(t)
	s.set(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, span := tp.Tracer("test").Start(ctx, info.FullMethod)
		defer span.End()
		return u(ctx, req, info, h)
	}, nil)
	cl := s.dial(t)
	for range 2 {
		_, _ = cl.Check(t.Context(), &healthpb.HealthCheckRequest{})
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []map[attribute.Key]string{
		{"rtserver.admission.allowed": "true", "rtserver.admission.class": "probe"},
		{"rtserver.admission.allowed": "false", "rtserver.admission.class": "probe", "rtserver.admission.reason": "RATE"},
	} {
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range spans[i].Attributes() {
			got[kv.Key] = kv.Value
		}
		for k, v := range want {
			if got[k].String() != v {
				t.Errorf("span %d: %s = %q, want %q", i, k, got[k].String(), v)
			}
		}
		if ms := got["rtserver.admission.retry_after_ms"].AsInt64(); (i == 1) != (ms >= 59_000) {
			t.Errorf("span %d: retry_after_ms %d", i, ms)
		}
	}
}
