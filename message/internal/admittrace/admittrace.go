package admittrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/message"
)

// Attribute keys, documented in docs/admission.md ("Tracing").
const (
	KeyAllowed      = attribute.Key("rtserver.admission.allowed")
	KeyClass        = attribute.Key("rtserver.admission.class")
	KeyReason       = attribute.Key("rtserver.admission.reason")
	KeyRetryAfterMs = attribute.Key("rtserver.admission." + retryhint.ReasonKey)
)

// Record sets the decision's attributes on ctx's span when it is
// recording: allowed and class always; the binding reason and the retry
// hint (whole milliseconds, as in the response) when denied.
func Record(ctx context.Context, class string, d message.Decision) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if d.Allowed {
		span.SetAttributes(KeyAllowed.Bool(true), KeyClass.String(class))
		return
	}
	span.SetAttributes(
		KeyAllowed.Bool(false),
		KeyClass.String(class),
		KeyReason.String(d.Reason),
		KeyRetryAfterMs.Int64(d.RetryAfterMillis()),
	)
}
