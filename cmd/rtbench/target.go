package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// loopbackHost reports whether host (no port) is loopback: an address in
// 127.0.0.0/8 or ::1, or the name localhost. Other names are refused
// without resolving them: a resolver could answer anything.
func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return a.Unmap().IsLoopback() && a.Zone() == ""
}

// checkURL refuses any URL whose host is not loopback, and any scheme
// rtbench does not speak.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "ws", "wss", "http", "https":
	default:
		return nil, fmt.Errorf("url %q: scheme must be ws, wss, http or https", raw)
	}
	if !loopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("url %q: refusing a target that is not loopback (127.0.0.0/8, ::1, localhost)", raw)
	}
	return u, nil
}

// checkListen refuses a listen address that is not loopback.
func checkListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: %w", addr, err)
	}
	if !loopbackHost(host) {
		return fmt.Errorf("listen %q: refusing an address that is not loopback", addr)
	}
	return nil
}

// metricsURL is the /metrics URL on the same host as a WebSocket URL.
func metricsURL(ws *url.URL) string {
	u := *ws
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	u.Path, u.RawQuery = "/metrics", ""
	return u.String()
}

// dialer opens WebSocket connections, each on a fresh TCP connection (no
// keep-alive: a shed upgrade's socket must not be reused for the next
// attempt, or the storm would be cheaper than a real one). For an IPv4
// loopback target the source address cycles through 127.0.0.1-250, so
// tens of thousands of connections do not run out of ephemeral ports on
// one source address, and a per-IP limit sees 250 clients.
type dialer struct {
	url    string
	client *http.Client
	proto  []string
	next   atomic.Uint32
	// tcp opens the TCP connection under each WebSocket (rawconn.go
	// dials with it too).
	tcp func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newDialer(u *url.URL, subprotocols []string) *dialer {
	d := &dialer{url: u.String(), proto: subprotocols}
	nd := &net.Dialer{Timeout: 10 * time.Second}
	spread := false
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Unmap().Is4() && a.IsLoopback() {
		spread = true
	}
	d.tcp = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !spread {
			return nd.DialContext(ctx, network, addr)
		}
		n := d.next.Add(1)
		ld := *nd
		ld.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(n%250+1))}
		return ld.DialContext(ctx, network, addr)
	}
	tr := &http.Transport{
		DisableKeepAlives:   true,
		DisableCompression:  true,
		MaxIdleConnsPerHost: -1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.tcp(ctx, network, addr)
			return wrapConn(ctx, c, err) // dialBuffered's connection
		},
	}
	d.client = &http.Client{Transport: tr}
	return d
}

func (d *dialer) dial(ctx context.Context) (*websocket.Conn, *http.Response, error) {
	c, resp, err := websocket.Dial(ctx, d.url, &websocket.DialOptions{
		HTTPClient:      d.client,
		Subprotocols:    d.proto,
		CompressionMode: websocket.CompressionDisabled,
	})
	if c != nil {
		c.SetReadLimit(16 << 20)
		if engineIOOn() {
			if err := sioOpen(ctx, c); err != nil {
				c.CloseNow()
				return nil, resp, err
			}
		}
		if centrifugoOn() {
			if err := cfOpen(ctx, c); err != nil {
				c.CloseNow()
				return nil, resp, err
			}
		}
	}
	return c, resp, err
}
