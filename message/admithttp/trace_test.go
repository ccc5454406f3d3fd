package admithttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
)

// TestDecisionOnSpan: the decision is recorded on the request's span,
// allowed and shed alike, and a request without a span is served as usual.
func TestDecisionOnSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(t.Context()) }()
	tracer := tp.Tracer("test")

	c := newClass(t, message.Rule{Rate: &message.Rate{Limit: 1, Per: time.Minute}})
	h := admithttp.Middleware(c)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		ctx, span := tracer.Start(t.Context(), "req")
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		span.End()
	}
	// Untraced, and traced but not sampled: nothing to record, no panic.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := never.Tracer("test").Start(t.Context(), "unsampled")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	span.End()

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	want := []map[attribute.Key]attribute.Value{
		{
			"rtserver.admission.allowed": attribute.BoolValue(true),
			"rtserver.admission.class":   attribute.StringValue("api"),
		},
		{
			"rtserver.admission.allowed": attribute.BoolValue(false),
			"rtserver.admission.class":   attribute.StringValue("api"),
			"rtserver.admission.reason":  attribute.StringValue("RATE"),
		},
	}
	for i, s := range spans {
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("span %d: %s = %v, want %v", i, k, got[k].String(), v.String())
			}
		}
		ms, ok := got["rtserver.admission.retry_after_ms"]
		if i == 0 && ok {
			t.Errorf("allowed span carries a retry hint %v", ms.String())
		}
		if i == 1 && (!ok || ms.AsInt64() < 59_000) {
			t.Errorf("shed span: retry_after_ms %v, want about a minute", ms.String())
		}
		if s.SpanKind() != trace.SpanKindInternal || s.Status().Code != 0 {
			t.Errorf("span %d: kind %v status %v changed; the adapter must only add attributes", i, s.SpanKind(), s.Status())
		}
	}
}
