// Package clientip resolves the client address of an HTTP request under
// the trusted-proxy rule shared by the WebSocket handshake gate and the
// admission middleware (docs/configuration.md, handshake.trustedProxies):
// the socket peer, or behind trusted proxies the right-most
// X-Forwarded-For entry that is not itself a trusted proxy. It also forms
// the rate-limit key of an address (IPv6 keyed by its /64).
//
// It must never trust a header from an untrusted peer, and never panic on
// a malformed one (a malformed entry makes the header untrustworthy).
// Resolving an IPv4 client allocates nothing.
package clientip
