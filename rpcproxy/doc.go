// Package rpcproxy forwards application RPCs to an HTTP backend: the
// standalone binary's way to run application methods without Go code.
//
// Each call is POSTed as the JSON-RPC request object the client sent, with
// the caller's identity in headers (X-Rtserver-User, X-Rtserver-Conn,
// X-Rtserver-Client-Ip). The backend answers with a JSON-RPC response
// object: its result is relayed as the call's result, its error object is
// relayed as it is (code, message, data). Anything else — a transport
// error, a timeout, a non-2xx status, a response over the size bound, bytes
// that are not a JSON-RPC response — answers -32005 UPSTREAM, and the
// backend's failure text never reaches the client.
package rpcproxy
