package rtserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/rtserver/rtserver/internal/acceptlog"
)

// ErrNodeClosed is what Serve and ListenAndServe return after Shutdown or
// Close, and when called again on a node that has served: a node serves
// once. It is http.ErrServerClosed, as for an http.Server.
var ErrNodeClosed = http.ErrServerClosed

// ListenAndServe listens on Config.Listen and serves (see Serve).
func (n *Node) ListenAndServe() error {
	// No TCP keep-alive: WebSocket pings find dead peers, and Go's default
	// keep-alive costs four setsockopt calls per accepted connection, a
	// tenth of what shedding an upgrade at the door costs in a storm.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", n.cfg.Listen)
	if err != nil {
		n.closeUnserved()
		return fmt.Errorf("rtserver: listen: %w", err)
	}
	return n.Serve(ln)
}

// Serve serves ln (and AdminListen, when set) at once, then starts the
// node's parts in order (see parts.go), and runs until Shutdown or Close;
// it returns ErrNodeClosed once everything it started has stopped. From
// its first moment /healthz answers 200 and /readyz 503 ("starting"); a
// part that needs Redis starts within a second whatever Redis does and
// keeps connecting in the background (/readyz names the bus until Redis
// answers). When a part cannot run or a listener fails, everything stops
// at once, without a drain, and Serve returns that error. Serve takes
// ownership of ln; a nil ln serves no listener of the node's own (see
// Start). An upgrade that comes while the parts start waits for
// them (at most that second), as it would in the listen queue.
//
// Order of stop: the drain (listeners still serving /readyz 503 and
// /metrics), the parts in reverse order of start, the listeners.
func (n *Node) Serve(ln net.Listener) error {
	if !n.claimServe() {
		closeIf(ln)
		return ErrNodeClosed
	}
	defer close(n.done)
	// The admin listener is opened first, so that nothing has started
	// when it fails.
	var aln net.Listener
	if n.adminMux != nil {
		var err error
		if aln, err = net.Listen("tcp", n.cfg.AdminListen); err != nil {
			closeIf(ln)
			n.closeParts()
			return fmt.Errorf("rtserver: admin listen: %w", err)
		}
	}
	g, failed := errgroup.WithContext(context.Background())
	servers := n.serveListeners(g, ln, aln)

	startErr := n.startParts(failed)
	n.starting.Store(false)
	if startErr == nil {
		close(n.started) // Handler serves from now on
	}
	g.Go(func() error {
		n.stopWhenAsked(failed, startErr != nil)
		err := n.closeParts()
		for _, srv := range servers {
			srv.Close()
		}
		return err
	})
	err := errors.Join(startErr, g.Wait())
	n.log.Info("stopped")
	if err == nil {
		err = ErrNodeClosed
	}
	return err
}

// serveListeners serves ln (nil: none, for Start) and aln (nil: none) on
// g, logs that the node listens and warns about what is exposed.
func (n *Node) serveListeners(g *errgroup.Group, ln, aln net.Listener) []*http.Server {
	// Upgrades and event streams (GET /sse, admitted as upgrades and
	// hijacked) are served by the door: shed there while a cap is full,
	// before net/http spends a goroutine and two buffers parsing them, and
	// otherwise served without net/http's per-connection buffers, which
	// a hijacked connection leaves behind as garbage
	// (handshake.ServingListener). Everything else goes to net/http.
	// Running out of file descriptors is counted and logged (net/http
	// only retries, and says so at debug level).
	errorLog := slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)
	var servers []*http.Server
	addr := "(Handler, on the program's server)"
	if ln != nil {
		// The door is given the listener itself, whose socket options it
		// may set (the accept's deferral until a head is in).
		ln = n.gate.ServingListener(ln, "/ws", n.mux, "/sse")
		ln = acceptlog.Wrap(ln, n.metrics.AcceptFDExhausted, n.log)
		srv := n.cfg.HTTP.server(n.mux, errorLog)
		servers = append(servers, srv)
		g.Go(func() error { return serveHTTP(srv, ln) })
		addr = ln.Addr().String()
	}
	if aln != nil {
		admin := n.cfg.HTTP.server(n.adminMux, errorLog)
		aln = acceptlog.Wrap(aln, n.metrics.AcceptFDExhausted, n.log)
		servers = append(servers, admin)
		g.Go(func() error { return serveHTTP(admin, aln) })
	}
	n.log.Info("rtserver listening", "addr", addr, "admin", n.cfg.AdminListen)
	n.warnExposed(addr)
	return servers
}

// closeIf closes ln unless it is nil.
func closeIf(ln net.Listener) {
	if ln != nil {
		ln.Close()
	}
}

// claimServe marks the node served; false when it has served or is
// stopping already: a node serves once.
func (n *Node) claimServe() bool {
	n.life.Lock()
	defer n.life.Unlock()
	if n.served || n.stopping {
		return false
	}
	n.served = true
	return true
}

// stopWhenAsked waits for Shutdown (and drains), Close or a failure (stop
// at once); now: a part could not start, stop at once.
func (n *Node) stopWhenAsked(failed context.Context, now bool) {
	if now {
		return
	}
	var drainCtx context.Context
	select {
	case <-n.stop:
		n.life.Lock()
		drainCtx = n.drainCtx
		n.life.Unlock()
	case <-failed.Done():
	}
	if drainCtx != nil {
		n.drain(drainCtx, failed)
	}
}

// warnExposed says once what is risky about where the node listens.
func (n *Node) warnExposed(addr string) {
	if s := len(n.cfg.Auth.JWT.HMACSecret); s > 0 && s < minHMACSecret {
		n.log.Warn("auth.jwt.hmacSecret is shorter than 32 bytes: a short HS256 secret can be guessed offline from one token; use 32 or more random bytes (docs/authentication.md)", "bytes", s)
	}
	if n.access.PublishableByAny() && !loopback(addr) {
		n.log.Warn("anyone, anonymous clients included, may publish on some topics while the server listens beyond loopback; restrict topics.default.publish and topics.namespaces (docs/access-control.md)", "addr", addr)
	}
}

// drain closes every client spread over drain.duration; the end of ctx
// (Shutdown's deadline, or Close) or the failure of a listener ends it
// early, and the rest are closed at once.
func (n *Node) drain(ctx, failed context.Context) {
	n.log.Info("draining", "duration", n.cfg.Drain.Duration)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(failed, cancel)()
	n.server.Drain(ctx, n.cfg.Drain.Duration)
}

// Shutdown stops the node gracefully, as http.Server's Shutdown does:
// new upgrades are refused, /readyz turns 503, every client is told and
// closed with 1012 spread over drain.duration, then the parts stop in
// order and Shutdown returns once Serve has. When ctx ends first, the
// remaining connections are closed at once and Shutdown returns ctx's
// error once everything has stopped. Called before Serve, it releases
// what New holds, and Serve then returns ErrNodeClosed.
func (n *Node) Shutdown(ctx context.Context) error {
	n.life.Lock()
	if !n.stopping {
		n.stopping = true
		n.drainCtx, n.cancelDrain = context.WithCancel(ctx)
		close(n.stop)
	}
	served := n.served
	n.life.Unlock()
	if !served {
		n.closeUnserved()
		return nil
	}
	<-n.done
	return ctx.Err()
}

// Close stops the node at once: every connection is closed without a
// drain (or, during a Shutdown, the drain is cut short), the parts stop
// in order, and Close returns once Serve has.
func (n *Node) Close() error {
	n.life.Lock()
	if !n.stopping {
		n.stopping = true
		close(n.stop)
	} else if n.cancelDrain != nil {
		n.cancelDrain()
	}
	served := n.served
	n.life.Unlock()
	if !served {
		n.closeUnserved()
		return nil
	}
	<-n.done
	return nil
}

// closeUnserved releases what New holds (the Redis client) for a node that
// will never serve.
func (n *Node) closeUnserved() { n.closeParts() }

// serveHTTP serves srv on ln until srv is closed (which is not an error).
func serveHTTP(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("rtserver: serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// minHMACSecret is the shortest auth.jwt.hmacSecret that starts without a
// warning: HS256's own output size (docs/authentication.md).
const minHMACSecret = 32
