// Package rtserver assembles a complete rtserver node from its parts: the
// handshake gate, the pressure monitor, the message-tier admission with its
// class rules, the bus (memory or Redis), the cluster aggregator, the
// WebSocket server, and the HTTP endpoints (/ws, /metrics, /healthz,
// /readyz).
//
// Config is the whole configuration tree of docs/configuration.md; each
// section is the Config of the package that uses it, which owns its
// defaults and its validation. The standalone binary (cmd/rtserver) only
// loads its YAML file, environment and flags into Config. An application
// that embeds rtserver builds a Config, calls New, registers its RPC
// handlers with Handle, and serves until a signal (or calls Serve and
// Shutdown itself, as with an http.Server):
//
//	node, err := rtserver.New(rtserver.DefaultConfig(), rtserver.Deps{})
//	node.Handle("chat.say", say)
//	err = rtserver.RunUntilSignal(node, nil) // SIGTERM drains, a second signal stops at once
//
// The pieces stay usable on their own (package server with its own
// options, handshake.Gate as plain net/http middleware, message.Admission
// in any dispatcher).
package rtserver
