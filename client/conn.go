package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/protocol"
)

// writeTimeout bounds one frame write. Writes do not use the caller's
// context: coder/websocket closes the connection when a write's context ends
// mid-frame, and one impatient caller must not cut every other call off.
// A write stuck this long means the server stopped reading: the connection
// is closed and (with Reconnect) replaced.
const writeTimeout = 10 * time.Second

// handshakeTimeout bounds a reconnect attempt (upgrade plus the ping that
// confirms it) when HTTPClient has no Timeout. The first Dial uses the
// caller's context instead.
const handshakeTimeout = 15 * time.Second

// deliverBuffer is the number of notifications the reader may queue for the
// handler goroutine before it stops reading. It absorbs a server batch frame
// or a burst while a handler runs; past it the backpressure goes to the
// socket on purpose (see doc.go).
const deliverBuffer = 1024

// response answers one pending call.
type response struct {
	result json.RawMessage
	err    error // *protocol.Error, or ErrDisconnected/ErrClosed wrapping the cause
}

// conn is one WebSocket connection and the calls in flight on it.
type conn struct {
	ws     *websocket.Conn
	binary bool          // the server chose the binary protocol (binary.go)
	done   chan struct{} // closed when the reader has exited and pending is drained

	mu      sync.Mutex
	pending map[uint64]chan response
	hooks   map[uint64]func(json.RawMessage) // run by the reader on a call's result (history.go)
	err     error                            // why the reader stopped; set before done is closed
	drain   time.Duration                    // reconnectAfterMs of a "draining" event, a fallback hint
}

// delivery is one notification for the handler goroutine.
type delivery struct {
	method    string // "message", "system", "presence" or methodRecovery
	topic     string // message, recovery
	data      json.RawMessage
	offset    uint64 // message: its place in a history topic (0: none)
	event     string // system; a recovery's reason
	recovered bool   // recovery
}

// connect dials, starts the reader and confirms the connection with a ping
// round trip. The ping is what lets Dial report a close right after the
// upgrade (handshake shed in close mode, docs/handshake.md): the server's
// close frame precedes any pong on the stream, so a connection that
// survives the ping was really admitted.
func (c *Client) connect(ctx context.Context) (*conn, error) {
	header, err := c.header(ctx)
	if err != nil {
		return nil, err
	}
	ws, resp, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{
		HTTPClient:   c.opts.HTTPClient,
		HTTPHeader:   header,
		Subprotocols: c.opts.Subprotocols,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != 101 {
			return nil, handshakeError(resp, time.Now())
		}
		return nil, err
	}
	ws.SetReadLimit(c.opts.ReadLimit)
	cn := &conn{ws: ws, done: make(chan struct{}), pending: map[uint64]chan response{}}
	cn.binary = ws.Subprotocol() == protocol.BinarySubprotocol
	if c.opts.Binary && !cn.binary {
		ws.Close(websocket.StatusPolicyViolation, "")
		return nil, errNotBinary
	}
	c.wg.Add(1)
	go c.readLoop(cn)
	if err := ws.Ping(ctx); err != nil {
		ws.CloseNow()
		<-cn.done
		var ce *CloseError
		if errors.As(cn.err, &ce) {
			return nil, ce
		}
		return nil, fmt.Errorf("rtclient: connection not confirmed: %w", err)
	}
	return cn, nil
}

// readLoop reads frames until the connection ends, answers calls and hands
// notifications to the dispatcher. On exit it fails every pending call.
func (c *Client) readLoop(cn *conn) {
	defer c.wg.Done()
	var err error
	for {
		var typ websocket.MessageType
		var b []byte
		// c.ctx, not a per-read deadline: the server pings us, and Close
		// cancels c.ctx, which closes the socket under this read.
		typ, b, err = cn.ws.Read(c.ctx)
		if err != nil {
			break
		}
		if b, err = cn.inbound(typ, b); err != nil {
			c.opts.Logger.Warn("rtclient: ignoring frame from server", "err", err)
			continue
		}
		if !c.handleFrame(cn, b) {
			err = c.ctx.Err()
			break
		}
	}
	var wce websocket.CloseError
	if errors.As(err, &wce) {
		err = &CloseError{Code: int(wce.Code), Reason: wce.Reason, RetryAfter: retryhint.FromReason(wce.Reason)}
	}
	cn.ws.CloseNow()

	failWith := ErrDisconnected
	if c.closing.Load() {
		failWith = ErrClosed
	}
	cn.mu.Lock()
	cn.err = err
	pending := cn.pending
	cn.pending = nil
	cn.mu.Unlock()
	for _, ch := range pending {
		ch <- response{err: wrapCause(failWith, err)}
	}
	close(cn.done)
}

func wrapCause(sentinel, cause error) error {
	if cause == nil {
		return sentinel
	}
	return fmt.Errorf("%w: %w", sentinel, cause)
}

// inbound is one server message: a response or a notification.
type inbound struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *wireError      `json:"error"`
}

type wireError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// handleFrame processes one text frame: a single JSON value, or an array of
// them (a server batch). It returns false when the client is closing and
// the reader should stop.
func (c *Client) handleFrame(cn *conn, b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) > 0 && b[0] == '[' {
		// One validation pass, then a plain split: unmarshalling into
		// []json.RawMessage cost more than handling the elements.
		if !json.Valid(b) {
			c.opts.Logger.Warn("rtclient: undecodable batch frame")
			return true
		}
		ok := true
		eachElement(b, func(e []byte) bool {
			ok = c.handleValue(cn, e)
			return ok
		})
		return ok
	}
	return c.handleValue(cn, b)
}

func (c *Client) handleValue(cn *conn, b []byte) bool {
	if topic, data, ok := fastMessage(b); ok {
		return c.enqueue(delivery{method: protocol.NotifyMessage, topic: topic, data: data})
	}
	var m inbound
	if err := json.Unmarshal(b, &m); err != nil {
		c.opts.Logger.Warn("rtclient: undecodable server message", "err", err)
		return true
	}
	if m.Method != "" {
		return c.notification(cn, &m)
	}
	id, err := strconv.ParseUint(string(m.ID), 10, 64)
	if err != nil {
		// id null: the server could not tie an error to one of our
		// requests (e.g. a parse error). Nothing to answer; say it.
		if m.Error != nil {
			c.opts.Logger.Warn("rtclient: server error without id", "code", m.Error.Code, "message", m.Error.Message)
		}
		return true
	}
	var r response
	if m.Error != nil {
		pe := &protocol.Error{Code: m.Error.Code, Message: m.Error.Message}
		if m.Error.Data != nil {
			pe.Data = m.Error.Data
		}
		r.err = pe
	} else {
		r.result = m.Result
	}
	cn.mu.Lock()
	ch, ok := cn.pending[id]
	delete(cn.pending, id)
	hook := cn.hooks[id]
	delete(cn.hooks, id)
	cn.mu.Unlock()
	if hook != nil && r.err == nil {
		// In order with the frames around it: a subscribe's position is
		// set before the messages that follow its result are read.
		hook(r.result)
	}
	if ok {
		ch <- r // 1-buffered, and each id is answered once
	}
	return true
}

func (c *Client) notification(cn *conn, m *inbound) bool {
	d := delivery{method: m.Method}
	switch m.Method {
	case protocol.NotifyMessage:
		var p struct {
			Topic  string          `json:"topic"`
			Offset *uint64         `json:"offset"`
			Data   json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			c.opts.Logger.Warn("rtclient: bad message notification", "err", err)
			return true
		}
		if p.Offset != nil && !c.advance(p.Topic, *p.Offset) {
			return true // a duplicate of what this subscription already had
		}
		d.topic, d.data = p.Topic, p.Data
		if p.Offset != nil {
			d.offset = *p.Offset
		}
	case protocol.NotifySystem:
		var p struct {
			Event            string `json:"event"`
			ReconnectAfterMs int64  `json:"reconnectAfterMs"`
			Topic            string `json:"topic"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			c.opts.Logger.Warn("rtclient: bad system notification", "err", err)
			return true
		}
		if p.Event == protocol.EventDraining && p.ReconnectAfterMs > 0 {
			cn.mu.Lock()
			cn.drain = time.Duration(min(p.ReconnectAfterMs, retryhint.MaxHint.Milliseconds())) * time.Millisecond
			cn.mu.Unlock()
		}
		c.systemEvent(p.Event, p.Topic)
		d.event, d.data = p.Event, m.Params
	case protocol.NotifyPresence:
		d.data = m.Params
	default:
		c.opts.Logger.Debug("rtclient: ignoring notification", "method", m.Method)
		return true
	}
	return c.enqueue(d)
}

// enqueue hands d to the dispatcher, waiting while its buffer is full.
func (c *Client) enqueue(d delivery) bool {
	select {
	case c.deliver <- d:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// register adds a pending call; it fails when the connection has ended.
func (cn *conn) register(id uint64) (chan response, error) {
	ch := make(chan response, 1)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.pending == nil {
		return nil, wrapCause(ErrDisconnected, cn.err)
	}
	cn.pending[id] = ch
	return ch, nil
}

// forget drops a pending call whose caller gave up.
func (cn *conn) forget(id uint64) {
	cn.mu.Lock()
	delete(cn.pending, id)
	delete(cn.hooks, id)
	cn.mu.Unlock()
}

// setHook has the reader run hook on id's result (nil: nothing).
func (cn *conn) setHook(id uint64, hook func(json.RawMessage)) {
	if hook == nil {
		return
	}
	cn.mu.Lock()
	if cn.hooks == nil {
		cn.hooks = map[uint64]func(json.RawMessage){}
	}
	cn.hooks[id] = hook
	cn.mu.Unlock()
}

func (cn *conn) write(ctx context.Context, b []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	typ, b, err := cn.outbound(b)
	if err != nil {
		return err
	}
	return cn.ws.Write(ctx, typ, b)
}

// hint is the retry hint for reconnecting after this connection ended: the
// close reason's hint, else a draining event's reconnectAfterMs.
func (cn *conn) hint() time.Duration {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if h := retryHint(cn.err); h > 0 {
		return h
	}
	return cn.drain
}

// encodeRequest builds a request frame; id 0 makes a notification.
func encodeRequest(id uint64, method string, params any) ([]byte, error) {
	b := make([]byte, 0, 128)
	b = append(b, `{"jsonrpc":"2.0"`...)
	if id != 0 {
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, id, 10)
	}
	m, err := json.Marshal(method)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"method":`...)
	b = append(b, m...)
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("rtclient: encoding params of %s: %w", method, err)
		}
		b = append(b, `,"params":`...)
		b = append(b, p...)
	}
	return append(b, '}'), nil
}

// msgPrefix and msgMiddle frame a "message" notification exactly as the
// server writes it (protocol.AppendMessage).
var (
	msgPrefix = []byte(`{"jsonrpc":"2.0","method":"message","params":{"topic":"`)
	msgMiddle = []byte(`","data":`)
	msgSuffix = []byte(`}}`)
)

// fastMessage recognises a message notification in the server's own byte
// layout without reflection (most of what a subscriber receives; decoding
// it with encoding/json cost about 4x more). Topics never need escaping
// (the grammar has no quote or backslash), and data must be exactly one
// valid JSON value, so anything else, including a valid message written
// differently, reports ok false and goes through encoding/json.
func fastMessage(b []byte) (topic string, data json.RawMessage, ok bool) {
	rest, found := bytes.CutPrefix(b, msgPrefix)
	if !found {
		return "", nil, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || !protocol.ValidTopic(string(rest[:i])) {
		return "", nil, false
	}
	d, found := bytes.CutPrefix(rest[i:], msgMiddle)
	if !found {
		return "", nil, false
	}
	d, found = bytes.CutSuffix(bytes.TrimRight(d, " \t\r\n"), msgSuffix)
	d = bytes.Trim(d, " \t\r\n") // JSON whitespace only, as encoding/json trims a RawMessage
	if !found || !json.Valid(d) {
		return "", nil, false
	}
	return string(rest[:i]), d, true
}

// eachElement calls f with each element of the JSON array b, which must be
// valid JSON (json.Valid), until f returns false. Validity is what makes a
// byte scan that only tracks strings and nesting enough.
func eachElement(b []byte, f func(elem []byte) bool) {
	depth, start := 0, -1
	inString, escaped := false, false
	for i, ch := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
			continue
		}
		switch ch {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth == 1 {
				continue // the batch array itself
			}
		case ']', '}':
			depth--
			if depth == 0 { // end of the batch array
				if start >= 0 && !f(bytes.TrimRight(b[start:i], " \t\r\n")) {
					return
				}
				return
			}
		case ',':
			if depth == 1 {
				if !f(bytes.TrimRight(b[start:i], " \t\r\n")) {
					return
				}
				start = -1
				continue
			}
		}
		if start < 0 && depth >= 1 {
			start = i
		}
	}
}
