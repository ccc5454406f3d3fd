package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Client is a connection to rtserver that survives reconnects (when
// Options.Reconnect is set). All methods are safe for concurrent use.
type Client struct {
	url  string
	opts Options

	// ctx lives as long as the client; cancelling it stops every goroutine.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	nextID  atomic.Uint64
	closing atomic.Bool // Close or CloseNow was called
	deliver chan delivery
	done    chan struct{} // closed when the client reaches Closed

	stateMu sync.Mutex // serialises state changes and OnState calls
	state   State

	mu   sync.Mutex
	conn *conn // nil while not Connected
	// up, when not nil, is closed when the next connection is Connected:
	// what awaitLive waits on (made by the first waiter).
	up   chan struct{}
	subs map[string]*Subscription
	err  error // why the client closed on its own; set before done is closed
}

// Dial connects to url (ws:// or wss://, e.g. "ws://host:8080/ws") and
// returns a client once the server has admitted the connection. A nil
// opts is DefaultOptions(): the client reconnects after a drop.
//
// The first connection is made here, synchronously, and is not retried
// even with Reconnect: a *HandshakeError reports an HTTP rejection (its
// RetryAfter carries the server's hint), a *CloseError a close right after
// the upgrade (1013 with a retry hint in close mode, 1012 while draining).
// Reconnect applies once connected.
func Dial(ctx context.Context, url string, opts *Options) (*Client, error) {
	c := &Client{
		url:     url,
		opts:    opts.withDefaults(),
		deliver: make(chan delivery, deliverBuffer),
		done:    make(chan struct{}),
		subs:    map[string]*Subscription{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.setState(Connecting, nil)
	cn, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		c.wg.Wait()
		c.setState(Closed, err)
		return nil, err
	}
	c.mu.Lock()
	c.conn = cn
	c.mu.Unlock()
	c.setState(Connected, nil)
	c.wg.Add(2)
	go c.dispatch()
	go c.run(cn)
	return c, nil
}

// awaitLive waits until the client has a live connection (at once when
// it has one), ctx ends, or the client closes for good.
func (c *Client) awaitLive(ctx context.Context) error {
	c.mu.Lock()
	if cn := c.conn; cn != nil {
		select {
		case <-cn.done:
			// Dropped and not yet cleared by the run loop: up is closed
			// only by the next connection, so waiting on it is right.
		default:
			c.mu.Unlock()
			return nil
		}
	}
	if c.up == nil {
		c.up = make(chan struct{})
	}
	up := c.up
	c.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}

// State returns the current state.
func (c *Client) State() State {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.state
}

// Done is closed when the client reaches Closed: after Close, or when the
// connection ended for good (no Reconnect, or a refusal that does not
// reconnect). Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the client closed on its own (a *CloseError, a
// *HandshakeError, a network error), or nil while it is open or after a
// Close by the caller.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection with 1001 (going away, after the close
// handshake), stops reconnecting, fails calls in flight with ErrClosed and
// waits until every goroutine of the client has exited, including a
// handler that is running. It must not be called from a handler or a
// callback (use "go c.Close()" there).
func (c *Client) Close() error { return c.close(true) }

// CloseNow is Close without the close handshake.
func (c *Client) CloseNow() error { return c.close(false) }

func (c *Client) close(handshake bool) error {
	first := !c.closing.Swap(true)
	c.mu.Lock()
	cn := c.conn
	c.mu.Unlock()
	var err error
	if first && cn != nil {
		if handshake {
			err = cn.ws.Close(websocket.StatusGoingAway, "")
		} else {
			err = cn.ws.CloseNow()
		}
		if errors.Is(err, net.ErrClosed) {
			err = nil // it was already going: nothing to report
		}
	}
	c.cancel()
	c.wg.Wait()
	c.setState(Closed, nil)
	return err
}

// setState records s and reports it. It does nothing once Closed.
func (c *Client) setState(s State, err error) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.state == Closed {
		return // final: later reports (a Close after the server's) are dropped
	}
	c.state = s
	if s == Closed {
		c.mu.Lock()
		if !c.closing.Load() {
			c.err = err
		}
		c.mu.Unlock()
		close(c.done)
	}
	if c.opts.OnState != nil {
		c.opts.OnState(s, err)
	}
}

// run owns reconnection: it waits for the current connection to end, then
// dials again with backoff until connected, resubscribes, and repeats. On
// exit no reader is left, so it closes deliver, which ends the dispatcher.
func (c *Client) run(cn *conn) {
	defer c.wg.Done()
	defer close(c.deliver)
	for {
		<-cn.done
		c.mu.Lock()
		c.conn = nil
		c.mu.Unlock()
		if c.closing.Load() {
			return // Close: it cancels c.ctx once the close handshake is over
		}
		cause := cn.err
		if !c.opts.Reconnect || c.final(cause, nil) {
			c.cancel()
			c.setState(Closed, cause)
			return
		}
		c.setState(Disconnected, cause)
		cn = c.reconnect(cn.hint())
		if cn == nil {
			return
		}
	}
}

// reconnect dials until a connection is up and resubscribed. It returns
// nil when the client is closed or refused for good.
func (c *Client) reconnect(hint time.Duration) *conn {
	var prev error // the previous attempt's error
	for attempt := 0; ; attempt++ {
		d := backoff(attempt, c.opts.MinBackoff, c.opts.MaxBackoff, hint, c.opts.Rand())
		c.opts.Logger.Debug("rtclient: reconnecting", "attempt", attempt, "wait", d, "hint", hint)
		if c.opts.Sleep(c.ctx, d) != nil || c.closing.Load() {
			return nil
		}
		c.setState(Connecting, nil)
		ctx, cancel := c.ctx, context.CancelFunc(func() {})
		if c.opts.HTTPClient == nil || c.opts.HTTPClient.Timeout == 0 {
			ctx, cancel = context.WithTimeout(c.ctx, handshakeTimeout)
		}
		cn, err := c.connect(ctx)
		cancel()
		if err == nil {
			if err = c.resubscribe(cn); err == nil {
				c.mu.Lock()
				c.conn = cn
				if c.up != nil {
					close(c.up)
					c.up = nil
				}
				c.mu.Unlock()
				c.setState(Connected, nil)
				return cn
			}
			cn.ws.CloseNow()
			<-cn.done
		}
		if c.closing.Load() {
			return nil
		}
		if c.final(err, prev) {
			c.cancel()
			c.setState(Closed, err)
			return nil
		}
		c.setState(Disconnected, err)
		hint = retryHint(err)
		prev = err
	}
}
