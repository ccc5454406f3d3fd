package rtserver

import (
	"log"
	"net/http"
	"time"
)

// Defaults of HTTPTimeouts (http.* in docs/configuration.md).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
)

// HTTPTimeouts bound how long the main and admin HTTP servers wait on a
// client. Without them a client that sends one request and then stays
// silent (or sends a byte or three of the next) holds a connection and a
// goroutine forever, outside every cap. A WebSocket is not affected: once
// upgraded, the connection leaves net/http (which clears its deadlines)
// and is watched by pings instead. Zero fields take the defaults.
type HTTPTimeouts struct {
	// ReadHeaderTimeout bounds reading a request's head, from its first
	// byte (from the accept for a connection's first request). Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"readHeaderTimeout" help:"longest time to read a request's head; 0 = 10s"`
	// ReadTimeout bounds reading a whole request, body included. Default 30s.
	ReadTimeout time.Duration `yaml:"readTimeout" help:"longest time to read a whole request, body included; 0 = 30s"`
	// IdleTimeout closes a keep-alive connection that sends no next request
	// within it. Default 120s: longer than the 60s idle timeout of common
	// load balancers, which must close first or they may send a request on
	// a connection being closed.
	IdleTimeout time.Duration `yaml:"idleTimeout" help:"a keep-alive connection with no next request within this is closed; keep it above your load balancer's idle timeout; 0 = 2m"`
}

func (t HTTPTimeouts) withDefaults() HTTPTimeouts {
	if t.ReadHeaderTimeout <= 0 {
		t.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if t.ReadTimeout <= 0 {
		t.ReadTimeout = DefaultReadTimeout
	}
	if t.IdleTimeout <= 0 {
		t.IdleTimeout = DefaultIdleTimeout
	}
	return t
}

// server is an http.Server for h with these timeouts.
func (t HTTPTimeouts) server(h http.Handler, errorLog *log.Logger) *http.Server {
	t = t.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeaderTimeout,
		ReadTimeout:       t.ReadTimeout,
		IdleTimeout:       t.IdleTimeout,
		ErrorLog:          errorLog,
	}
}
