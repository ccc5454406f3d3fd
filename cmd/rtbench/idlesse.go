package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rtserver/rtserver/internal/ctxsleep"
)

// runIdleSSE is runIdle for Server-Sent Events streams (idle --sse): it
// opens cfg.N streams, GET /sse?topic=room:<i mod topics> (or, with no
// topics, GET /sse?rpc: a stream with no subscription, as an idle
// WebSocket has none), each on a socket of its own read by one
// goroutine, waits until each has its first event (the subscription's,
// or the session's), and measures the server as runIdle does.
func runIdleSSE(ctx context.Context, cfg idleConfig, topics int) (*idleResult, error) {
	if cfg.N <= 0 || cfg.C <= 0 {
		return nil, fmt.Errorf("idle: -n and -c must be positive")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	u := *cfg.URL
	u.Scheme = "http"
	u.Path, u.RawQuery = "/sse", ""
	res := &idleResult{URL: u.String(), Attempted: cfg.N}
	before, err := snapshotServer(ctx, cfg)
	if err != nil {
		return nil, err
	}

	var (
		mu      sync.Mutex
		conns   []net.Conn
		acc     hist
		kinds   = map[string]int{}
		open    atomic.Int64
		readers sync.WaitGroup
		tickets atomic.Int64
		dialers sync.WaitGroup
	)
	start := time.Now()
	for range cfg.C {
		dialers.Add(1)
		go func() {
			defer dialers.Done()
			for ctx.Err() == nil {
				i := tickets.Add(1)
				if i > int64(cfg.N) {
					return
				}
				query, first := "rpc", "session"
				if topics > 0 {
					query, first = "topic=room:"+strconv.FormatInt(i%int64(topics), 10), "subscribed"
				}
				begin := time.Now()
				c, br, err := openStream(ctx, &u, int(i), query, first, cfg.DialTimeout)
				mu.Lock()
				if err != nil {
					kinds[errKind(err)]++
					mu.Unlock()
					continue
				}
				acc.Record(time.Since(begin))
				conns = append(conns, c)
				mu.Unlock()
				open.Add(1)
				// The stream's keepalive comments are read, as a browser
				// reads them; the reader ends when the stream does.
				readers.Add(1)
				go func() {
					defer readers.Done()
					defer open.Add(-1)
					_, _ = io.Copy(io.Discard, br)
				}()
			}
		}()
	}
	dialers.Wait()
	res.DialSeconds = time.Since(start).Seconds()
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		readers.Wait()
	}()
	res.Connected = len(conns)
	res.Failed = cfg.N - res.Connected
	res.FailKinds = nonEmpty(kinds)
	res.AcceptLat = acc.Summary()
	if err := ctxsleep.Sleep(ctx, cfg.Settle); err != nil {
		return nil, err
	}
	res.Open = int(open.Load())
	after, err := snapshotServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res.RSSBefore, res.RSSAfter = before.rss, after.rss
	res.GoBefore, res.GoAfter = before.goroutines, after.goroutines
	if cfg.MetricsURL != "" {
		res.ConnsOpen, _ = scrapeMetric(ctx, cfg.MetricsURL, "connections_open")
	}
	if n := float64(res.Open); n > 0 {
		res.RSSPerConn = float64(after.rss-before.rss) / n
		res.GoPerConn = (after.goroutines - before.goroutines) / n
		res.HeapAllocPerConn = (after.mem[0] - before.mem[0]) / n
		res.HeapInusePerConn = (after.mem[1] - before.mem[1]) / n
		res.StackPerConn = (after.mem[2] - before.mem[2]) / n
	}
	return res, nil
}

// serverState is what runIdleSSE reads of the server before and after.
type serverState struct {
	rss        int64
	goroutines float64
	mem        [len(memSeries)]float64
}

func snapshotServer(ctx context.Context, cfg idleConfig) (serverState, error) {
	var s serverState
	var err error
	if cfg.ServerPID != 0 {
		if s.rss, err = procRSS(cfg.ServerPID); err != nil {
			return s, fmt.Errorf("server rss: %w", err)
		}
	}
	if cfg.MetricsURL != "" {
		if s.goroutines, err = scrapeMetric(ctx, cfg.MetricsURL, "go_goroutines"); err != nil {
			return s, err
		}
		for i, name := range memSeries {
			s.mem[i], _ = scrapeMetric(ctx, cfg.MetricsURL, name)
		}
	}
	return s, nil
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
