// Package handshake is the upgrade gate (docs/handshake.md): it decides,
// before websocket.Accept does any work, whether a WebSocket upgrade may
// proceed, and answers the ones it sheds.
//
// Gate.Admit checks, in this order: the connection and in-flight caps
// (reserving a slot of each), the per-client-IP upgrade rate, the Origin,
// the JWT, pacing (at most PerTickBudget upgrades per Tick, the excess
// waiting FIFO up to MaxQueueWait and released in up to 16 even steps
// across each Tick, never a whole budget at once), and draining. A shed
// upgrade gets 503 (429 for the per-IP rate) with Retry-After and a JSON
// body, or in close mode a completed upgrade closed at once with 1013 and
// the hint in its reason (internal/retryhint writes all three); origin and auth failures are always plain 403 / 401.
// Retry hints are jittered and grow with the recent shedding rate, so a
// rejected crowd comes back spread out rather than in lockstep.
//
// Gate.Listener (the door) wraps the server's listener: while reject mode
// is http and a cap is full, it reads a new connection's request head
// itself and answers a plain `GET /ws` with the same 503 and metric as
// Admit's step 1, without net/http; everything else, and every connection
// while no cap is full, goes on to net/http (peeked bytes replayed). It
// decides with the same cap predicate as Admit, never reserves a slot,
// and never sheds health or other paths. Gate.ServingListener is the door
// that also serves every well-formed `GET /ws` itself with the handler it
// is given (which must call Admit first, as always), outside net/http:
// the upgrade then leaves none of net/http's per-connection buffers
// behind (doorserve.go). It may be given more paths that are admitted
// and hijacked as upgrades are (rtserver's `GET /sse`): the door sheds and
// serves those alike. The door keeps the policy (when to shed, what
// the answer says, the peeker bound, metrics); reading, classifying and
// parsing the head and writing the response are internal/wsock's.
//
// It exposes client-IP resolution (ClientIP: the socket peer, or the
// right-most untrusted X-Forwarded-For entry behind trusted proxies; IPv6
// keyed by /64; the rule lives in internal/clientip, shared with the HTTP
// admission middleware) and owns the handshake_* and connections_open
// metrics.
//
// Authentication (auth.go, jwks.go; docs/authentication.md): JWTs signed
// with the HMAC secret, the PEM public key, or a key picked by kid from a
// JWKS URL, with exp, nbf and the configured aud and iss enforced.
// VerifyToken checks a token the same way for a connection's refresh. The
// JWKS is fetched by New (an error stops it), read lock-free, and fetched
// again for an unknown kid or when older than JWKSMaxAge, at most once per
// JWKSMinRefetch, one fetch at a time (callers with an unknown kid wait
// for the fetch under way, bounded by their request's context).
//
// A refused token (refusal.go) answers 401 with the RFC 6750 challenge
// naming the check that failed (never key material), is counted in
// handshake_auth_refused_total{reason} and logged at debug level;
// RefusalOf gives the same reason for any error of the check. JWT.SignHMAC
// and JWT.Check (token.go) sign and check tokens outside a gate, for
// backends and the binary's token and checktoken subcommands.
//
// It must never import the server or know about JSON-RPC; it sees an
// http.Request and a caller-owned Ticket, nothing more.
//
// # Invariants
//
//   - Exactly-once release. A Ticket's slots live in one atomic state word:
//     HandshakeDone(ok) releases the in-flight slot once (ok=false the
//     connection slot too); Close releases whatever is still held. Every
//     extra call is a no-op, and every rejection inside Admit releases
//     before it answers, so when Admit returns false nothing is held.
//   - Caps are never exceeded, even in a storm: slots are taken with an
//     increment-if-below CAS, the connection slot at arrival and held until
//     Close, so in-flight plus open never exceed MaxConnections.
//   - Open() counts slots even when MaxConnections is 0, and the
//     connections_open gauge counts established connections (after
//     HandshakeDone(true), until Close): the server relies on both.
//   - The admit fast path (no pacing wait, no auth, IPv4 client) allocates
//     nothing; shedding as HTTP allocates only what net/http does.
//   - An idle gate runs nothing: pacing tokens are counted per tick window
//     from the clock, and the one timer runs only while someone waits.
//   - Bounded: the pacing queue by MaxConcurrent and by what could be
//     served within MaxQueueWait; the per-IP store by perIPMaxKeys (LRU,
//     never failing open; see package ratelimit).
//   - Lock order: the pacer mutex, then (inside it) only gauge updates.
//     The ratelimit shard mutexes are never held together with it.
//
// A waiter whose client goes away is dropped and frees its slots without
// an answer and without counting a rejection: the reasons of
// handshake_rejected_total are
// the gate's decisions, and nobody is left to receive one. The pacer's
// timer asks the request contexts that can tell without waiting (the
// door's) every 20 ms, once a waiter has waited that long, so a leaver is
// noticed within about 40 ms and a queue costs no goroutine per waiter;
// any other context's Done is waited on as the grant is.
package handshake
