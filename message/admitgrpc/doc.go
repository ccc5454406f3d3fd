// Package admitgrpc guards a gRPC server (google.golang.org/grpc) with the
// message tier's classes: a unary and a stream server interceptor choose
// each call's class by its full method name through a message.Router
// (exact names or path.Match globs, e.g. "/pkg.Service/*"), check it, and
// end a shed call at once with codes.ResourceExhausted (a RATE or COST
// budget binds) or codes.Unavailable (anything else), carrying
// google.rpc.RetryInfo and google.rpc.ErrorInfo (docs/admission.md).
// Client interceptors (unary, and server-streaming until the first
// message) retry calls shed that way after the hinted delay.
//
// It owns each admitted call's message.Call and concurrency lease. Calls
// are keyed by the peer's IP (behind TrustedProxies, the x-forwarded-for
// metadata under the handshake's trusted-proxy rule), or by the Key option.
//
// It must never run the handler of a shed call, never release a lease
// twice, and never keep one after the call is over. The client
// interceptor must never retry a call that was not shed by admission (no
// RetryInfo), nor wait past the call's deadline.
//
// # Invariants
//
//   - Exactly-once release. The lease of an admitted call is given back by
//     one deferred call when the handler returns: for a unary call when it
//     has its answer, for a stream when the stream ends (the handler's
//     return is the stream's end), and when the handler panics, before
//     the panic goes on unchanged. A call whose handler panicked or whose
//     context had ended (client gone, deadline) is released as
//     message.Dropped, and so is one whose error has a DropOnCodes code;
//     otherwise as message.Completed.
//   - A shed call never reached the handler, so retrying it is safe even
//     for a method that is not idempotent; that is why the client
//     interceptor retries only on RetryInfo.
//   - Client retries are bounded (MaxRetries) and each wait is at least the
//     server's hint and at most one and a half times it (jitter), so a shed
//     crowd does not come back in step.
package admitgrpc
