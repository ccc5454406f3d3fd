package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// runIdleSSE is runIdle for Server-Sent Events streams (idle --sse): it
// opens cfg.N streams, GET /sse?topic=room:<i mod topics> (or, with no
// topics, GET /sse?rpc: a stream with no subscription, as an idle
// WebSocket has none), each on a socket of its own read by one
// goroutine, waits until each has its first event (the subscription's,
// or the session's), and measures the server as runIdle does.
func runIdleSSE(ctx context.Context, cfg idleConfig, topics int) (*idleResult, error) {
	res, closeConns, err := openIdleSSE(ctx, cfg, topics)
	if err != nil {
		return nil, err
	}
	closeConns()
	return res, nil
}

// openIdleSSE opens and measures runIdleSSE's streams, which stay open
// until closeConns.
func openIdleSSE(ctx context.Context, cfg idleConfig, topics int) (res *idleResult, closeConns func(), err error) {
	u := *cfg.URL
	u.Scheme = "http"
	u.Path, u.RawQuery = "/sse", ""
	cfg = cfg.withDefaults()
	res, closeConns, err = measureIdle(ctx, cfg, u.String(), func(i int64) (idleConn, string) {
		query, first := "rpc", "session"
		if topics > 0 {
			query, first = "topic="+idleTopic(i, topics), "subscribed"
		}
		c, br, err := openStream(ctx, &u, int(i), query, first, cfg.DialTimeout)
		if err != nil {
			return idleConn{}, errKind(err)
		}
		return idleConn{
			// The stream's keepalive comments are read, as a browser
			// reads them; the reader ends when the stream does.
			read:  func() { _, _ = io.Copy(io.Discard, br) },
			close: func() { c.Close() },
		}, ""
	})
	if err != nil {
		return nil, nil, err
	}
	res.Topics = topics
	return res, closeConns, nil
}

// openStream opens GET u?query on a socket of its own (from 127.0.0.x,
// x spread by i, on loopback: the server's per-IP limits see many
// clients, as runIdle's dialer arranges) and reads up to the data of the
// first event of type first.
func openStream(ctx context.Context, u *url.URL, i int, query, first string, timeout time.Duration) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: timeout}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Unmap().Is4() && a.IsLoopback() {
		d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i%250+1))}
	}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "GET "+u.Path+"?"+query+" HTTP/1.1\r\nHost: "+u.Host+"\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		c.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(c, 512)
	status, err := br.ReadString('\n')
	if err == nil && !strings.HasPrefix(status, "HTTP/1.1 200 ") {
		err = fmt.Errorf("HTTP %s", strings.TrimSpace(strings.TrimPrefix(status, "HTTP/1.1")))
	}
	for err == nil {
		var line string
		if line, err = br.ReadString('\n'); err == nil && line == "event: "+first+"\n" {
			break
		}
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}
