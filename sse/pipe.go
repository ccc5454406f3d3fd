package sse

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/internal/wsock"
)

// mode is what a pipe's client is.
type mode uint8

const (
	// modeEvents: GET /sse?topic=...: each message's params as an event,
	// with an id on history topics; the rest as named events.
	modeEvents mode = iota
	// modeRPC: GET /sse?rpc: every server frame as an event, unchanged:
	// the downlink of a JSON-RPC client (the JS client's fallback).
	modeRPC
	// modeOnce: POST /sse without a session: one frame up, its answer as
	// the POST's response, then the connection ends.
	modeOnce
)

// pipe is the in-memory socket the server's WebSocket connection runs on
// for one SSE session or one POST. The server writes whole WebSocket
// frames to it (Write) and reads client frames from it (Read).
//
// An idle stream holds its pipe for as long as it is open, so the pipe
// holds only what every kind needs; what one kind alone uses hangs off a
// pointer that the others leave nil (events, call).
type pipe struct {
	h    *Handler
	nc   net.Conn // the client's socket, hijacked (modeEvents, modeRPC); set before the server writes
	ev   *events  // modeEvents: the session's topics and positions
	call *call    // modeOnce: the answer, and how the connection closed

	// Server-bound bytes: whole client frames, queued by queue.
	rmu      sync.Mutex
	rbuf     *[]byte       // nil (not an empty slice, 24 bytes) while nothing is queued
	deadline int64         // the read deadline: nanoseconds since epoch, 0 for none (a time.Time is 24 bytes)
	notify   chan struct{} // made by the first Read that waits: an idle session never does
	waker    wsock.Waker   // the parked server connection (Arm), woken by the next input or end

	// Client-bound state, under wmu (the server writes from one goroutine
	// at a time, but several may take turns).
	wmu  sync.Mutex
	pend *[]byte // the start of a frame not yet whole; nil (not an empty slice, 24 bytes) while none is

	id      sessionID // the session's id; zero for modeOnce
	mode    mode
	rend    bool        // under rmu: no more input, Read reports io.EOF after rbuf
	watched bool        // under rmu: the server parks on the pipe (Arm), its reads watch the client's socket too
	closed  atomic.Bool // Close has run (it runs once)
}

// events is an event stream's own state (modeEvents).
type events struct {
	topics []string   // in the request's order
	pos    []position // each topic's position, by index; nil until one has one, epoch "" for none
}

// call is a POST's own state (modeOnce).
type call struct {
	answer    chan []byte   // 1-buffered: the first response frame
	gone      chan struct{} // closed by Close
	closeCode atomic.Uint32 // how the connection closed without an answer
	closeWhy  atomic.Pointer[string]
}

// epoch is the origin of pipe deadlines, read with its monotonic clock.
var epoch = time.Now()

func newPipe(h *Handler, m mode) *pipe {
	p := &pipe{h: h, mode: m}
	if m == modeOnce {
		p.call = &call{answer: make(chan []byte, 1), gone: make(chan struct{})}
	}
	return p
}

// queue adds one client frame for the server to read, and reports
// whether the server will: false once the connection has ended.
func (p *pipe) queue(op byte, payload []byte) bool {
	p.rmu.Lock()
	if p.rend {
		p.rmu.Unlock()
		return false
	}
	if p.rbuf == nil {
		p.rbuf = new([]byte)
	}
	*p.rbuf = appendClientFrame(*p.rbuf, op, payload)
	w, n := p.takeWaker()
	p.rmu.Unlock()
	wake(w, n)
	return true
}

// takeWaker takes the parked connection's Waker, if it is parked (it is
// woken once), and the channel a waiting Read waits on, if one ever did.
// Under rmu.
func (p *pipe) takeWaker() (wsock.Waker, chan struct{}) {
	w := p.waker
	p.waker = nil
	return w, p.notify
}

// wake resumes the server's read: a parked connection (w) or a Read
// waiting on notify, from takeWaker.
func wake(w wsock.Waker, notify chan struct{}) {
	if w != nil {
		w.Wake()
	}
	if notify != nil {
		select {
		case notify <- struct{}{}:
		default:
		}
	}
}

// endInput makes the server's next read report the end of the input: the
// client's socket failed or hung up, or the pipe closed.
func (p *pipe) endInput() {
	p.rmu.Lock()
	p.rend = true
	w, n := p.takeWaker()
	p.rmu.Unlock()
	wake(w, n)
}

// Ready reports whether the server's Read would not wait
// (wsock.Parkable): frames are queued, or the input has ended, or the
// client has hung up, which ends it.
func (p *pipe) Ready() bool {
	p.rmu.Lock()
	ready := p.rbuf != nil || p.rend
	p.rmu.Unlock()
	if !ready && p.hungUp() {
		p.endInput()
		return true
	}
	return ready
}

// hungUp reports whether the client has closed its socket (or it failed):
// an event stream's client sends nothing after its request, so whatever
// arrives is its end, or bytes to drop.
func (p *pipe) hungUp() bool {
	sc := p.socket()
	return sc != nil && wsock.HungUp(sc)
}

// socket is the descriptor of the client's socket, watched for its
// hang-up; nil without one. It is not kept: a RawConn held by every idle
// stream would be 24 bytes of each.
func (p *pipe) socket() syscall.RawConn {
	if p.nc == nil {
		return nil
	}
	return wsock.Descriptor(wsock.Socket(p.nc))
}

// Arm parks the server's connection on the pipe (wsock.Parkable): w is
// woken by the next frame queued or the end of the input, and by the
// client's socket in poller when the client hangs up (or sends anything),
// so a stream whose client has left ends at once rather than at the next
// keepalive that fails to write. Without a poller only the first two wake
// it.
func (p *pipe) Arm(poller *wsock.Poller, key uint64, w wsock.Waker) error {
	p.rmu.Lock()
	ready := p.rbuf != nil || p.rend
	if !ready {
		p.waker = w
	}
	p.watched = true
	p.rmu.Unlock()
	if ready {
		w.Wake()
		return nil
	}
	if sc := p.socket(); poller != nil && sc != nil {
		// A failure means the socket is closed: so is the pipe, whose
		// Close has woken w (endInput).
		_ = poller.Arm(sc, key, w)
	}
	return nil
}

// Read is the server's read of client frames: it waits until some are
// queued, the input ends, or the read deadline passes.
func (p *pipe) Read(b []byte) (int, error) {
	for {
		p.rmu.Lock()
		if p.rbuf != nil {
			n := copy(b, *p.rbuf)
			*p.rbuf = (*p.rbuf)[n:]
			if len(*p.rbuf) == 0 {
				p.rbuf = nil // an idle session keeps no buffer
			}
			p.rmu.Unlock()
			return n, nil
		}
		if p.rend {
			p.rmu.Unlock()
			return 0, io.EOF
		}
		dl, watched := p.deadline, p.watched
		if p.notify == nil {
			p.notify = make(chan struct{}, 1)
		}
		notify := p.notify
		p.rmu.Unlock()
		// A read that waits on a parking connection's pipe (a wake-up
		// came while it parked, or it is closing) looks first whether
		// the client has gone: nothing watches its socket meanwhile.
		if watched && p.hungUp() {
			p.endInput()
			continue
		}
		if dl == 0 {
			<-notify
			continue
		}
		wait := time.Until(epoch.Add(time.Duration(dl)))
		if wait <= 0 {
			return 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(wait)
		select {
		case <-notify:
		case <-t.C:
		}
		t.Stop()
	}
}

// Write takes the server's frames for the client: each whole frame is
// translated (frame) and what it makes is written to the client's socket
// in one write. A frame cut across writes waits in pend for its rest.
func (p *pipe) Write(b []byte) (int, error) {
	if p.closed.Load() {
		return 0, net.ErrClosed
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	data := b
	if p.pend != nil {
		data = append(*p.pend, b...)
	}
	var out []byte
	for {
		op, payload, n := nextServerFrame(data)
		if n == 0 {
			break
		}
		out = p.frame(out, op, payload)
		data = data[n:]
	}
	if len(data) > 0 {
		rest := append([]byte(nil), data...)
		p.pend = &rest
	} else {
		p.pend = nil
	}
	if len(out) > 0 && p.nc != nil {
		if _, err := p.nc.Write(out); err != nil {
			// The client has gone: the server's next read ends the
			// connection, as a WebSocket peer's end would.
			p.endInput()
			return 0, err
		}
	}
	return len(b), nil
}

// frame translates one server frame, appending what the client gets to
// out. Under wmu.
func (p *pipe) frame(out []byte, op byte, payload []byte) []byte {
	switch op {
	case opText:
		return p.text(out, payload)
	case opPing:
		p.queue(opPong, payload)
		if p.mode != modeOnce {
			// A comment: it keeps proxies from timing the stream out,
			// and finds a client that has gone.
			out = append(out, ":\n\n"...)
		}
	case opClose:
		code, reason := uint16(1005), ""
		if len(payload) >= 2 {
			code, reason = binary.BigEndian.Uint16(payload), string(payload[2:])
		}
		if p.call != nil {
			p.call.closeCode.Store(uint32(code))
			p.call.closeWhy.Store(&reason)
		}
		// The echo that completes the close handshake.
		p.queue(opClose, payload[:min(2, len(payload))])
		if p.mode != modeOnce {
			if ms := retryhint.FromReason(reason).Milliseconds(); ms > 0 {
				// EventSource waits this long before it reconnects: a
				// drain's or a shed's spread holds for SSE clients too.
				out = append(out, "retry: "...)
				out = strconv.AppendInt(out, ms, 10)
				out = append(out, '\n', '\n')
			}
			ev, _ := json.Marshal(struct {
				Code   uint16 `json:"code"`
				Reason string `json:"reason"`
			}{code, reason})
			out = appendEvent(out, "close", nil, ev)
		}
	}
	return out
}

// messagePrefix starts every "message" notification the server writes
// (protocol.AppendMessage, protocol.AppendMessageAt).
const messagePrefix = `{"jsonrpc":"2.0","method":"message","params":`

// text translates one JSON-RPC frame from the server. Under wmu.
func (p *pipe) text(out, payload []byte) []byte {
	switch p.mode {
	case modeRPC:
		return appendEvent(out, "", nil, payload)
	case modeOnce:
		if !bytes.HasPrefix(payload, []byte(`{"jsonrpc":"2.0","method":`)) {
			select {
			case p.call.answer <- append([]byte(nil), payload...):
			default:
			}
		}
		return out
	}
	if bytes.HasPrefix(payload, []byte(messagePrefix)) && payload[len(payload)-1] == '}' {
		params := payload[len(messagePrefix) : len(payload)-1]
		var id []byte
		if ev := p.ev; ev.pos != nil {
			if topic, offset, ok := messagePosition(params); ok {
				if i := slices.Index(ev.topics, topic); i >= 0 && ev.pos[i].epoch != "" {
					ev.pos[i].offset = offset
					id = appendEventID(nil, ev.topics, ev.pos)
				}
			}
		}
		return appendEvent(out, "", id, params)
	}
	if i, result, rpcErr, ok := ownResponse(payload, len(p.ev.topics)); ok {
		return p.ev.subscribed(out, i, result, rpcErr)
	}
	var f struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(payload, &f) != nil {
		return out
	}
	if f.Method != "" {
		if f.Method == "system" {
			var sys struct {
				Event            string `json:"event"`
				ReconnectAfterMs int64  `json:"reconnectAfterMs"`
			}
			if json.Unmarshal(f.Params, &sys) == nil && sys.ReconnectAfterMs > 0 {
				out = append(out, "retry: "...)
				out = strconv.AppendInt(out, sys.ReconnectAfterMs, 10)
				out = append(out, '\n', '\n')
			}
		}
		return appendEvent(out, f.Method, nil, f.Params)
	}
	if i, ok := ownID(f.ID, len(p.ev.topics)); ok {
		return p.ev.subscribed(out, i, f.Result, f.Error)
	}
	return appendEvent(out, "response", nil, payload)
}

// subscribed turns the answer to the session's own subscribe to its i-th
// topic into a "subscribed" event (the result, with the topic) or a
// "refused" one (the error, with the topic), and takes a history topic's
// position from it. Under the pipe's wmu.
func (ev *events) subscribed(out []byte, i int, result, rpcErr json.RawMessage) []byte {
	topicJSON, _ := json.Marshal(ev.topics[i])
	if rpcErr != nil {
		e := append(append(append([]byte(`{"topic":`), topicJSON...), `,"error":`...), rpcErr...)
		return appendEvent(out, "refused", nil, append(e, '}'))
	}
	var r struct {
		Epoch     string `json:"epoch"`
		Offset    uint64 `json:"offset"`
		Recovered *bool  `json:"recovered"`
	}
	var id []byte
	// A topic without history answers {}: nothing to decode.
	if string(result) != "{}" && json.Unmarshal(result, &r) == nil && validEpoch(r.Epoch) {
		if ev.pos == nil {
			ev.pos = make([]position, len(ev.topics))
		}
		// A recovered subscription keeps the position it presented: the
		// replay that follows moves it, message by message, so an id
		// never names a place whose messages the client has not had.
		if r.Recovered == nil || !*r.Recovered || ev.pos[i].epoch != r.Epoch {
			ev.pos[i] = position{epoch: r.Epoch, offset: r.Offset}
		}
		id = appendEventID(nil, ev.topics, ev.pos)
	} else if ev.pos != nil && ev.pos[i].epoch != "" {
		// Not a history topic (any more): its place leaves the ids.
		ev.pos[i] = position{}
		id = appendEventID(nil, ev.topics, ev.pos)
	}
	e := append(make([]byte, 0, len(`{"topic":,`)+len(topicJSON)+len(result)), `{"topic":`...)
	e = append(e, topicJSON...)
	if len(result) > 2 && result[0] == '{' {
		e = append(append(e, ','), result[1:]...)
	} else {
		e = append(e, '}')
	}
	return appendEvent(out, "subscribed", id, e)
}

// ownResponse reads the server's answer to one of the session's own
// subscribes (one of n topics) as protocol.AppendResult and
// protocol.AppendError write it: {"jsonrpc":"2.0","id":"sse:I","result":R}
// or ...,"error":E}. Without decoding it: a JSON decode of every
// stream's first answer was most of the garbage of opening a topic
// stream. ok false leaves it to the decode.
func ownResponse(payload []byte, n int) (i int, result, rpcErr json.RawMessage, ok bool) {
	const head = `{"jsonrpc":"2.0","id":"` + ownIDPrefix
	if !bytes.HasPrefix(payload, []byte(head)) || payload[len(payload)-1] != '}' {
		return 0, nil, nil, false
	}
	rest := payload[len(head) : len(payload)-1]
	end := bytes.IndexByte(rest, '"')
	if end < 1 || end > 9 {
		return 0, nil, nil, false
	}
	for _, c := range rest[:end] {
		if c < '0' || c > '9' {
			return 0, nil, nil, false
		}
		i = i*10 + int(c-'0')
	}
	if i >= n || (end > 1 && rest[0] == '0') {
		return 0, nil, nil, false
	}
	rest = rest[end+1:]
	var value []byte
	switch {
	case bytes.HasPrefix(rest, []byte(`,"result":`)):
		value = rest[len(`,"result":`):]
	case bytes.HasPrefix(rest, []byte(`,"error":`)):
		value = rest[len(`,"error":`):]
	}
	if !json.Valid(value) {
		return 0, nil, nil, false // not one value: more fields, say
	}
	if rest[2] == 'r' {
		return i, value, nil, true
	}
	return i, nil, value, true
}

// ownIDPrefix marks the ids of the subscribes a session sends for its
// topics: "sse:" and the topic's index.
const ownIDPrefix = "sse:"

// ownID reports which of n topics a response id names, when it is one of
// the session's own.
func ownID(id json.RawMessage, n int) (int, bool) {
	s := string(id)
	if !strings.HasPrefix(s, `"`+ownIDPrefix) || !strings.HasSuffix(s, `"`) {
		return 0, false
	}
	i, err := strconv.Atoi(s[len(ownIDPrefix)+1 : len(s)-1])
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// messagePosition reads the topic and offset of a history message's
// params as protocol.AppendMessageAt writes them: {"topic":T,"offset":N,...}.
// A topic never needs escaping (its grammar has no quote or backslash).
func messagePosition(params []byte) (string, uint64, bool) {
	const head = `{"topic":"`
	if !bytes.HasPrefix(params, []byte(head)) {
		return "", 0, false
	}
	rest := params[len(head):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return "", 0, false
	}
	topic := rest[:end]
	rest = rest[end+1:]
	const off = `,"offset":`
	if !bytes.HasPrefix(rest, []byte(off)) {
		return "", 0, false
	}
	rest = rest[len(off):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return "", 0, false
	}
	return string(topic), v, true
}

// Close ends the pipe, once: the server closed its connection. The
// client's socket is closed with it (the end of the event stream).
func (p *pipe) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	p.rmu.Lock()
	p.rend = true
	p.rbuf = nil
	w, n := p.takeWaker()
	p.rmu.Unlock()
	wake(w, n)
	if p.nc != nil {
		_ = p.nc.Close()
	}
	if p.call != nil {
		close(p.call.gone)
	}
	p.h.forget(p)
	return nil
}

func (p *pipe) SetDeadline(t time.Time) error {
	_ = p.SetReadDeadline(t)
	return p.SetWriteDeadline(t)
}

func (p *pipe) SetReadDeadline(t time.Time) error {
	var dl int64
	if !t.IsZero() {
		dl = max(int64(t.Sub(epoch)), 1) // a deadline at epoch has passed too: not "none"
	}
	p.rmu.Lock()
	p.deadline = dl
	n := p.notify
	p.rmu.Unlock()
	wake(nil, n)
	return nil
}

// SetWriteDeadline bounds the writes to the client's socket: the server's
// write timeout holds for an SSE client as for a WebSocket one.
func (p *pipe) SetWriteDeadline(t time.Time) error {
	if p.nc != nil {
		return p.nc.SetWriteDeadline(t)
	}
	return nil
}

func (p *pipe) LocalAddr() net.Addr  { return pipeAddr{} }
func (p *pipe) RemoteAddr() net.Addr { return pipeAddr{} }

// pipeAddr is the address of either end of a pipe.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "sse" }
func (pipeAddr) String() string  { return "sse" }
