package rtserver

import (
	"net"
	"net/http"

	"github.com/rtserver/rtserver/serverapi"
)

// mountAPI serves the server API (docs/server-api.md) on the admin
// listener when there is one, else on the main listener. The API key
// guards it either way; on a main listener reachable beyond loopback it
// also faces the clients' network, which start-up says once.
func (n *Node) mountAPI() error {
	h, err := serverapi.New(serverapi.Config{
		Key:          n.cfg.API.Key,
		MaxBodyBytes: n.cfg.Limits.MaxMessageBytes,
		MaxJSONDepth: n.cfg.Limits.MaxJSONDepth,
	}, serverapi.Deps{
		Backend: apiBackend{n},
		Metrics: n.metrics,
		Logger:  n.log,
	})
	if err != nil {
		return err
	}
	// POST only: a pattern for every method would conflict with an
	// application's "GET /" on the same mux (HandleHTTP).
	pattern := http.MethodPost + " " + serverapi.Prefix
	if n.adminMux != nil {
		n.adminMux.Handle(pattern, h)
		return nil
	}
	n.mux.Handle(pattern, h)
	if !loopback(n.cfg.Listen) {
		n.log.Warn("the server API is served on the main listener, which listens beyond loopback: set adminListen to keep it off the clients' network", "listen", n.cfg.Listen)
	}
	return nil
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiBackend carries out server API calls on this node: the node's own
// verbs (verbs.go), so Go code and the API get the same answers.
type apiBackend struct{ *Node }

func (b apiBackend) Draining() bool { return b.server.Draining() }
