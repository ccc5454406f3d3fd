// Package rtserver assembles a complete rtserver node from its parts: the
// handshake gate, the pressure monitor, the message-tier admission with its
// class rules, the bus (memory or Redis), the cluster aggregator, the
// WebSocket server, and the HTTP endpoints (/ws, /metrics, /healthz,
// /readyz).
//
// The standalone binary (cmd/rtserver) is a thin layer over this package:
// it maps the YAML/env/flag configuration onto Config and handles signals.
// An application that embeds rtserver builds a Config the same way, calls
// New, registers its RPC handlers with Handle, and runs it:
//
//	node, err := rtserver.New(rtserver.Config{Listen: "127.0.0.1:8080"})
//	node.Handle("chat.say", say)
//	err = node.Run(ctx, nil) // until ctx ends; then drains and returns
//
// The pieces stay usable on their own (package server with its own
// options, handshake.Gate as plain net/http middleware, message.Admission
// in any dispatcher).
package rtserver
