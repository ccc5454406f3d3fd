// Package admittrace records an admission decision on the request's
// OpenTelemetry span, for the HTTP and gRPC adapters (message/admithttp,
// message/admitgrpc). It uses only the OpenTelemetry API: without an SDK
// installed every span is a no-op and recording costs a context lookup.
//
// It must never start, end or change the status of a span: the span
// belongs to whoever started it (otelhttp, otelgrpc, the application). It
// records only on a span that is recording, so the admitted path of an
// untraced request allocates nothing.
package admittrace
