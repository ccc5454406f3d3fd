package sse

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rtserver/rtserver/internal/bufpool"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/protocol"
)

// Config of a Handler.
type Config struct {
	// MaxMessageBytes bounds a POST's body, as limits.maxMessageBytes
	// bounds a WebSocket frame; default 65536.
	MaxMessageBytes int64
}

// Deps are what a Handler uses beside its configuration.
type Deps struct {
	// WebSocket is the server's GET /ws handler: every session and every
	// POST is one of its connections, admitted by its handshake tier.
	// The upgrade request it is given is the client's as far as the
	// server reads one (upgradeRequest): the client's other headers are
	// not carried. Required.
	WebSocket http.Handler
}

// Handler serves GET /sse (an event stream) and POST /sse (calls).
type Handler struct {
	ws      http.Handler
	maxBody int64

	mu       sync.Mutex
	sessions map[uint64]*pipe // by the first half of their ids (sessionID.key)
}

// sessionID is a session's id: 128 random bits, the capability to call
// on the session's connection, as unguessable as a token. Clients see it
// in hex; the handler keeps the bytes, no string.
type sessionID [16]byte

// key is the half of id the handler's session map is keyed by: an idle
// stream's entry is 8 bytes of key, not a string's 16 and its bytes. The
// other half is checked against the session's own (lookup).
func (id sessionID) key() uint64 { return binary.LittleEndian.Uint64(id[:8]) }

// New returns a handler over deps.WebSocket.
func New(cfg Config, deps Deps) (*Handler, error) {
	if deps.WebSocket == nil {
		return nil, errors.New("sse: no WebSocket handler")
	}
	h := &Handler{ws: deps.WebSocket, maxBody: cfg.MaxMessageBytes, sessions: map[uint64]*pipe{}}
	if h.maxBody <= 0 {
		h.maxBody = 65536
	}
	return h, nil
}

// Sessions is the number of open event streams.
func (h *Handler) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		h.serveStream(w, r)
	case http.MethodPost:
		h.servePost(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		httpError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "GET opens an event stream, POST sends calls")
	}
}

// serveStream opens an event stream: its connection through the server's
// handshake tier, then a subscribe per topic (recovering from
// Last-Event-ID on history topics). The handler returns once the stream
// is open: the client's socket is the pipe's from then on.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	q := readStreamQuery(r.URL.RawQuery)
	m := modeEvents
	topics := dedupe(q.topics)
	if q.rpc {
		m = modeRPC
		topics = nil
	} else if len(topics) == 0 {
		httpError(w, http.StatusBadRequest, "BAD_REQUEST", "give one or more topic parameters, or rpc")
		return
	}
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = q.lastEventID // for clients that cannot set headers
	}
	since := parseLastEventID(lastID)

	p := newPipe(h, m)
	if m == modeEvents {
		// The stream keeps its topics and positions for as long as it is
		// open: copies, not parts of the request's strings, which would
		// keep all of the query (a token) and of the Last-Event-ID alive.
		p.ev = &events{topics: topics}
		for i, t := range topics {
			topics[i] = strings.Clone(t)
			if pos, ok := since[t]; ok {
				if p.ev.pos == nil {
					p.ev.pos = make([]position, len(topics))
				}
				p.ev.pos[i] = position{epoch: strings.Clone(pos.epoch), offset: pos.offset}
			}
		}
	}
	up := &upgrade{w: w, p: p, stream: true, origin: r.Header.Get("Origin")}
	h.ws.ServeHTTP(up, upgradeRequest(r))
	if !up.hijacked {
		return // refused: the server answered (the handshake tier's status)
	}
	for i, t := range topics {
		p.queue(opText, subscribeFrame(i, t, since))
	}
}

// subscribeFrame is the session's subscribe to its i-th topic: with
// recover from the position Last-Event-ID named for it, if any. It is
// appended field by field (json.Marshal of the frame's struct left
// several times its size as garbage per stream); the strings are
// encoded as json.Marshal encodes them.
func subscribeFrame(i int, topic string, since map[string]position) []byte {
	topicJSON, _ := json.Marshal(topic)
	b := make([]byte, 0, 96+len(topicJSON)) // a frame without since fits
	b = append(b, `{"jsonrpc":"2.0","id":"`+ownIDPrefix...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","method":"`+protocol.MethodSubscribe+`","params":{"topic":`...)
	b = append(b, topicJSON...)
	if pos, ok := since[topic]; ok {
		epochJSON, _ := json.Marshal(pos.epoch)
		b = append(b, `,"recover":true,"since":{"offset":`...)
		b = strconv.AppendUint(b, pos.offset, 10)
		b = append(b, `,"epoch":`...)
		b = append(b, epochJSON...)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}

// servePost runs calls: into a session's connection when the session
// parameter names one (answers come on its stream), else on a
// connection of their own, answered in the response.
func (h *Handler) servePost(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, h.maxBody+1))
	if err != nil {
		return // the client went away mid-body
	}
	if int64(len(body)) > h.maxBody {
		httpError(w, http.StatusRequestEntityTooLarge, "TOO_LARGE", "body larger than limits.maxMessageBytes ("+strconv.FormatInt(h.maxBody, 10)+")")
		return
	}
	if !json.Valid(body) || !utf8.Valid(body) {
		rpcAnswer(w, protocol.AppendError(nil, nil, protocol.NewError(protocol.CodeParseError, "", nil)))
		return
	}
	if sid := r.URL.Query().Get("session"); sid != "" {
		var p *pipe
		if id, ok := parseSessionID(sid); ok {
			p = h.lookup(id)
		}
		if p == nil {
			httpError(w, http.StatusNotFound, "UNKNOWN_SESSION", "no open event stream has this session on this instance")
			return
		}
		if !p.queue(opText, body) {
			httpError(w, http.StatusGone, "SESSION_CLOSED", "the event stream of this session has ended")
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}

	p := newPipe(h, modeOnce)
	up := &upgrade{w: w, p: p}
	h.ws.ServeHTTP(up, upgradeRequest(r))
	if !up.hijacked {
		return
	}
	// After the answer (or at once for notifications only), a normal
	// close: the server reads it after the calls, so they all run.
	defer p.queue(opClose, []byte{0x03, 0xE8})
	p.queue(opText, body)
	if !expectsAnswer(body) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	select {
	case a := <-p.call.answer:
		rpcAnswer(w, a)
	case <-p.call.gone:
		select {
		case a := <-p.call.answer:
			rpcAnswer(w, a)
		default:
			closedAnswer(w, p)
		}
	case <-r.Context().Done():
	}
}

// expectsAnswer reports whether a JSON-RPC request or batch holds a call
// with an id: notifications alone get no answer.
func expectsAnswer(body []byte) bool {
	var one struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &one) == nil {
		return one.ID != nil
	}
	var batch []json.RawMessage
	if json.Unmarshal(body, &batch) != nil {
		return true // not a request: the server answers -32600
	}
	if len(batch) == 0 {
		return true
	}
	for _, e := range batch {
		if json.Unmarshal(e, &one) != nil || one.ID != nil {
			return true
		}
	}
	return false
}

// closedAnswer answers a POST whose connection the server closed before
// answering: a shed (1013) or a drain (1012) as 503 with its hint, a body
// over the limit as 413, anything else as 502.
func closedAnswer(w http.ResponseWriter, p *pipe) {
	code := p.call.closeCode.Load()
	reason := ""
	if s := p.call.closeWhy.Load(); s != nil {
		reason = *s
	}
	switch code {
	case 1012, 1013:
		ms := max(retryhint.FromReason(reason).Milliseconds(), 1)
		retryhint.Answer(w, http.StatusServiceUnavailable, retryhint.HeadOverloaded, ms)
		return
	case 1009:
		httpError(w, http.StatusRequestEntityTooLarge, "TOO_LARGE", reason)
		return
	}
	httpError(w, http.StatusBadGateway, "CLOSED", "connection closed before the answer: "+strconv.Itoa(int(code))+" "+reason)
}

func rpcAnswer(w http.ResponseWriter, a []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(a)
}

func httpError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{code, msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// lookup is the open session whose id is id, or nil.
func (h *Handler) lookup(id sessionID) *pipe {
	h.mu.Lock()
	p := h.sessions[id.key()]
	h.mu.Unlock()
	if p == nil || subtle.ConstantTimeCompare(p.id[:], id[:]) != 1 {
		return nil
	}
	return p
}

// register gives p its session id and keeps it under it.
func (h *Handler) register(p *pipe) {
	id := newSessionID()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.sessions[id.key()] != nil {
		id = newSessionID() // two sessions' ids share a half: 2^-64 a pair
	}
	p.id = id
	h.sessions[id.key()] = p
}

func (h *Handler) forget(p *pipe) {
	if p.mode == modeOnce {
		return // never registered
	}
	h.mu.Lock()
	if k := p.id.key(); h.sessions[k] == p {
		delete(h.sessions, k)
	}
	h.mu.Unlock()
}

func newSessionID() sessionID {
	var id sessionID
	_, _ = rand.Read(id[:])
	return id
}

// parseSessionID reads a session id as the session event wrote it: 32
// lower-case hex digits.
func parseSessionID(s string) (sessionID, bool) {
	var id sessionID
	if len(s) != hex.EncodedLen(len(id)) || strings.ContainsAny(s, "ABCDEF") {
		return id, false
	}
	_, err := hex.Decode(id[:], []byte(s))
	return id, err == nil
}

// dedupe drops the repeats of ts, in place, keeping the first of each.
func dedupe(ts []string) []string {
	out := ts[:0]
	if len(ts) <= 8 {
		// A few: compared, without a map.
		for _, t := range ts {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
		return out
	}
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// streamQuery is what GET /sse reads of its query.
type streamQuery struct {
	topics      []string // every topic parameter, in order
	rpc         bool     // an rpc parameter is there
	lastEventID string   // the first lastEventId parameter
}

// readStreamQuery reads a stream's query as url.ParseQuery reads it (pairs
// split at "&", each unescaped; a pair holding ";" or an escape that does
// not parse is skipped) without making a map of every parameter.
func readStreamQuery(raw string) streamQuery {
	var q streamQuery
	seenLast := false
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		if key != "topic" && key != "rpc" && key != "lastEventId" {
			continue
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			continue
		}
		switch key {
		case "topic":
			q.topics = append(q.topics, value)
		case "rpc":
			q.rpc = true
		case "lastEventId":
			if !seenLast {
				q.lastEventID, seenLast = value, true
			}
		}
	}
	return q
}

// upgradeKey is the Sec-WebSocket-Key of every in-process upgrade: any
// 16 bytes will do, the answer to it never leaves the process.
var upgradeKey = base64.StdEncoding.EncodeToString([]byte("rtserver sse key"))

// clientHeaders are the headers of the client's request the server reads
// of an upgrade: the origin check, the token, the client's address
// behind a trusted proxy.
var clientHeaders = [...]string{"Origin", "Authorization", "X-Forwarded-For"}

// upgradeHeader is an in-process upgrade's own header: a WebSocket
// upgrade offering no subprotocol and no extension.
var upgradeHeader = http.Header{
	"Connection":            {"Upgrade"},
	"Upgrade":               {"websocket"},
	"Sec-Websocket-Version": {"13"},
	"Sec-Websocket-Key":     {upgradeKey},
}

// upgradeRequest is the client's request as a WebSocket upgrade, so the
// handshake tier judges the client itself: the same address, Host, TLS
// state, URL (the token and name parameters), context (the values
// middleware put there) and the headers the server reads
// (clientHeaders), as the client sent them. The client's other headers
// are not the server's to read, and are not copied: an idle stream
// should not leave a copy of its client's request behind as garbage. A
// client that sent none of clientHeaders gets upgradeHeader itself, which
// nothing writes (net/http's rule: a handler does not modify its
// request).
func upgradeRequest(r *http.Request) *http.Request {
	hd := upgradeHeader
	for _, k := range clientHeaders {
		if _, ok := r.Header[k]; ok {
			hd = make(http.Header, len(upgradeHeader)+len(clientHeaders))
			maps.Copy(hd, upgradeHeader)
			for _, k := range clientHeaders {
				if v, ok := r.Header[k]; ok {
					hd[k] = v
				}
			}
			break
		}
	}
	u := r.WithContext(r.Context()) // a shallow copy: URL and the rest are shared, read only
	u.Method, u.Header = http.MethodGet, hd
	u.Body, u.GetBody, u.ContentLength = http.NoBody, nil, 0
	u.TransferEncoding, u.Trailer, u.Form, u.PostForm, u.MultipartForm = nil, nil, nil, nil, nil
	return u
}

// upgrade is the response writer the server's upgrade runs on. A refusal
// (any status but 101) goes to the client as written. An upgrade the
// server accepts gives it the pipe (open): through Accept, without the
// WebSocket library; on the portable path through the library's Accept,
// whose 101 is swallowed, and Hijack. For an event stream, open takes
// the client's socket and writes the stream's head on it.
type upgrade struct {
	w        http.ResponseWriter
	p        *pipe
	stream   bool
	origin   string
	hdr      http.Header
	wrote    bool
	hijacked bool
}

func (u *upgrade) Header() http.Header {
	if u.hdr == nil {
		u.hdr = http.Header{}
	}
	return u.hdr
}

func (u *upgrade) WriteHeader(code int) {
	if code == http.StatusSwitchingProtocols || u.wrote {
		return
	}
	u.wrote = true
	for k, v := range u.hdr {
		u.w.Header()[k] = v
	}
	u.w.WriteHeader(code)
}

func (u *upgrade) Write(b []byte) (int, error) {
	u.WriteHeader(http.StatusOK)
	return u.w.Write(b)
}

// streamHead starts an event stream's response head.
const streamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Accel-Buffering: no\r\nConnection: close\r\n"

// streamHeadTimeout bounds the write of an event stream's head.
const streamHeadTimeout = 10 * time.Second

// Accept opens the server's connection on the pipe without the WebSocket
// library (wsock.Acceptor), as the door's upgrades are: no library object
// per session, and no 101 to swallow.
func (u *upgrade) Accept(r *http.Request, subprotocols []string) (*wsock.Conn, string, bool) {
	return wsock.AcceptParkable(r, subprotocols, func() (wsock.Parkable, error) {
		p, err := u.open()
		if err != nil {
			if u.p.nc == nil {
				// The client's socket was not taken: it hears the
				// library's answer to a failed hijack.
				http.Error(u, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			}
			return nil, err
		}
		return p, nil
	})
}

// Hijack is open for the WebSocket library's Accept (the portable path).
func (u *upgrade) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	p, err := u.open()
	if err != nil {
		return nil, nil, err
	}
	return p, bufio.NewReadWriter(bufio.NewReaderSize(p, 16), bufio.NewWriterSize(p, 16)), nil
}

// open gives the server the pipe. For an event stream it takes the
// client's socket and writes the stream's head on it first.
func (u *upgrade) open() (*pipe, error) {
	p := u.p
	if u.stream {
		nc, _, err := http.NewResponseController(u.w).Hijack()
		if err != nil {
			// HTTP/2 cannot be hijacked: rtserver serves HTTP/1.1.
			return nil, errors.Join(errors.New("sse: the event stream needs HTTP/1.1"), err)
		}
		// Registered (which gives it its id) before the client can read
		// its session id.
		p.nc = nc
		p.h.register(p)
		// The head is made in a pooled buffer: it is garbage once written.
		buf := bufpool.Get()
		defer bufpool.Put(buf)
		buf.Grow(len(streamHead) + len(u.origin) + 128)
		head := append(buf.AvailableBuffer(), streamHead...)
		if u.origin != "" {
			// The handshake tier admitted this origin.
			head = append(head, "Access-Control-Allow-Origin: "...)
			head = append(head, u.origin...)
			head = append(head, "\r\nVary: Origin\r\n"...)
		}
		head = append(head, "\r\nevent: session\ndata: {\"session\":\""...)
		head = hex.AppendEncode(head, p.id[:])
		head = append(head, "\"}\n\n"...)
		_ = nc.SetWriteDeadline(time.Now().Add(streamHeadTimeout))
		if _, err := nc.Write(head); err != nil {
			p.h.forget(p)
			nc.Close()
			return nil, err
		}
		_ = nc.SetWriteDeadline(time.Time{})
	}
	u.hijacked = true
	return p, nil
}
