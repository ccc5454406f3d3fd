// Package serverapi is rtserver's HTTP API for backends (docs/server-api.md):
// POST /api/{publish,broadcast,disconnect,unsubscribe,info} with
// "Authorization: apikey KEY" and a JSON object body, answered with
// {"result":{...}} or {"error":{"code":C,"message":M}}.
//
// It owns the HTTP side only: the key check (constant time), the body
// limit, parameter validation with the client topic grammar, status codes
// and api_requests_total{method,code}. What a call does is the Backend's:
// the node publishes through the server and the bus, and sends disconnect
// and unsubscribe to every instance as bus control messages.
//
// Invariants: every request is answered with one JSON body and counted
// once; a request is checked in a fixed order (HTTP method, key, draining,
// API method, body size, JSON, params) and nothing reaches the Backend
// until all of its params are valid; the method label is bounded (names
// that are not API methods count as "unknown"); bad input never panics;
// bodies are read by the client protocol's one rule (package jsonexact:
// names exact, a repeated member refused, nesting bounded), so a body
// means the same thing here as it would to any other JSON reader.
package serverapi
