// Package admithttp guards any net/http handler with a message.Class: each
// request is checked against the class's rule before the handler runs, and
// a shed request is answered at once with 503 (or 429 when a RATE or COST
// budget binds), a Retry-After header and a JSON body (docs/admission.md).
//
// It owns the request's message.Call and its concurrency lease. Calls are
// keyed by the client IP under the trusted-proxy rule of the WebSocket
// handshake (internal/clientip), or by the Key option.
//
// It must never call the handler for a shed request, never release a lease
// twice, and never keep one after the request is over.
//
// # Invariants
//
//   - Exactly-once release. An admitted request's lease is given back once:
//     when the handler returns, or when it panics (the panic then goes on
//     unchanged), or, with ReleaseWhenClientGone, when the client goes away
//     first. Whoever wins a compare-and-swap on the request's state
//     releases; the others do nothing. A request whose client went away,
//     or whose handler panicked, is released as message.Dropped (and a 5xx
//     too with DropOn5xx); otherwise as message.Completed.
//   - The admitted path allocates nothing for an IPv4 client without
//     ReleaseWhenClientGone and without a recording span: the per-request
//     state is pooled, the client-IP key is a substring of RemoteAddr, and
//     the release is an open-coded defer rather than a closure.
//   - A pooled state is reused only when nothing else can touch it: a
//     ReleaseWhenClientGone callback that has started is never waited for,
//     its state is simply not returned to the pool.
package admithttp
