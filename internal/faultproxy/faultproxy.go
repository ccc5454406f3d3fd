package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards every connection made to Addr to the target.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	hole  bool
	delay time.Duration
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target until the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// BlackHole swallows everything either way while on, keeping the
// connections open: a dropped route. Turning it off resets every
// connection, as a route that comes back finds its TCP connections dead.
func (p *Proxy) BlackHole(on bool) {
	p.mu.Lock()
	p.hole = on
	p.mu.Unlock()
	if !on {
		p.Reset()
	}
}

// Delay holds every chunk from a client for d before forwarding it (0:
// none): a slow server, one round trip at a time.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Reset closes every connection at once, with a TCP reset.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Close stops listening, resets every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(s, c, true)
		go p.pump(c, s, false)
	}
}

// pump copies from src to dst, applying the faults, until either end
// closes; then it closes both.
func (p *Proxy) pump(dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole, delay := p.hole, p.delay
			p.mu.Unlock()
			if hole {
				continue
			}
			if delay > 0 && fromClient {
				time.Sleep(delay) // the fault itself: a slow server
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
