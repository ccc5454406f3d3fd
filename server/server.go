package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/deadlines"
	"github.com/rtserver/rtserver/internal/instance"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/protocol"
)

// Request is an application RPC as a Handler sees it.
type Request struct {
	Method string
	Params json.RawMessage // raw params, or nil
	// Raw is the whole JSON-RPC request object as the client sent it when
	// those bytes mean exactly Method, Params and ID to any JSON decoder
	// (protocol.Request.Plain; the RPC proxy forwards it as is). Nil
	// otherwise, and for the elements of a batch: encode the request from
	// Method, Params and ID instead.
	Raw  json.RawMessage
	ID   json.RawMessage // nil for a notification
	User string          // JWT sub, or "" when anonymous
	// Claims is the payload of the token the connection was opened with,
	// as the client sent it (a JSON object), verified; nil when anonymous.
	// A refresh does not change it: the connection's identity is its
	// first token's.
	Claims json.RawMessage
	IP     string // client IP key
	ConnID uint64
}

// Handler serves one application RPC. The context ends when the connection
// does, and carries the values of the upgrade request's context. A result of type json.RawMessage is sent as is; anything else is
// marshalled. An error of type *protocol.Error is sent as is; any other
// error answers -32603 without its text. A panic answers -32603 and the
// connection lives on.
type Handler func(ctx context.Context, req *Request) (any, error)

// Deps are what a Server uses beside its configuration (limits.*): its
// collaborators, and what it is told of other sections (history.*,
// presence.*, auth.jwt.refreshNotice, handshake.retryAfter). Every field
// may be nil or zero: then the server runs without that part (no gate:
// every upgrade is admitted; no router: every call is admitted; no bus: a
// single instance).
type Deps struct {
	Gate     *handshake.Gate
	Router   *message.Router
	Pressure *pressure.Monitor
	Bus      bus.Bus
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	// Fallback serves application methods with no registered handler (the
	// standalone binary's HTTP RPC proxy). Nil: -32601.
	Fallback Handler
	// Access decides subscribe and publish by topic grants, before the
	// message tier (docs/access-control.md); nil: every topic not
	// reserved for the server is open to everyone.
	Access *access.Checker
	// RefreshNotice is how long before its token's exp a connection gets
	// the tokenExpiring notice (auth.jwt.refreshNotice); default 30s
	// (docs/authentication.md).
	RefreshNotice time.Duration
	// DrainRetryAfter is the base of the retry hint sent with close code
	// 1012 during a drain, and with the 503 that refuses an upgrade while
	// draining without a gate (jittered); default 1s.
	DrainRetryAfter time.Duration

	// History keeps the streams of history topics (docs/history.md), and
	// HistoryPolicy says which topics keep one (Policy.Enabled). A nil
	// policy: no topic keeps history, and nothing of it costs anything.
	// A policy without a store: the server keeps the streams in its
	// process (a history.Memory store delivering through the server).
	History       history.Store
	HistoryPolicy func(topic string) history.Policy
	HistoryConfig history.Config
	// HistoryCheckInterval is how often the position of every idle
	// history topic with local subscribers is checked against the store,
	// to repair a lost last message; default 5s.
	HistoryCheckInterval time.Duration
	// Presence keeps who is in which topic (presence.go); the zero value
	// keeps nothing.
	Presence PresenceOptions
	// InstanceID names this instance in client ids (ClientID); empty: a
	// random one.
	InstanceID string
	// Subscribers is the table where the server keeps its topics and
	// their subscribers, for parts built before it that read the counts;
	// nil: a table of its own (Server.Subjects, Server.LocalSubscribers).
	Subscribers *Subscribers
}

// Server serves WebSocket connections. Create it with New.
type Server struct {
	cfg       Config
	epoch     time.Time // millis counts from here
	gate      *handshake.Gate
	router    *message.Router
	access    *access.Checker
	pressure  *pressure.Monitor
	bus       bus.Bus
	m         *metrics.Metrics
	log       *slog.Logger
	fallback  Handler
	drainHint time.Duration
	// closeWaitHook, when set (tests), hears each bound put on the wait
	// for a client's answer to a close frame sent with a deadline.
	closeWaitHook func(time.Duration)
	// refreshNotice is Deps.RefreshNotice.
	refreshNotice time.Duration

	tooBigReason string // the 1009 close reason, naming the limit

	handlers sync.Map // method -> Handler
	hub      hub
	hist     *historyState // nil: no history topics

	presence   *presence.Tracker
	instanceID string

	// Every connection's keepalive step and every token expiry, each on
	// one timer (conn.keepalive, tokenExpiry.fire).
	pings    *deadlines.Heap[*conn]
	expiries *deadlines.Heap[*tokenExpiry]

	// Where idle connections wait without a goroutine (conn.park).
	poller idlePoller

	mu    sync.Mutex
	conns map[*conn]struct{}
	users map[string][]*conn // authenticated connections by user (control.go)
	// busDown is the bus's last reported state: a connection that arrives
	// while it is down is told at once, as those already here were.
	busDown bool

	nextID        atomic.Uint64
	refusalPauses atomic.Uint64 // reads paced after refusals (shedpace.go)
	subscriptions atomic.Int64  // without a pressure monitor (Counts)
	draining      atomic.Bool
	closed        atomic.Bool
	wg            sync.WaitGroup // connection goroutines
}

// New returns a server. Call Start before serving if it has a bus.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.setDefaults()
	s := &Server{
		cfg:           cfg,
		epoch:         time.Now(),
		tooBigReason:  fmt.Sprintf("message larger than limits.maxMessageBytes (%d)", cfg.MaxMessageBytes),
		gate:          deps.Gate,
		router:        deps.Router,
		access:        deps.Access,
		pressure:      deps.Pressure,
		bus:           deps.Bus,
		m:             deps.Metrics,
		log:           deps.Logger,
		fallback:      deps.Fallback,
		drainHint:     deps.DrainRetryAfter,
		refreshNotice: deps.RefreshNotice,
		conns:         map[*conn]struct{}{},
		users:         map[string][]*conn{},
	}
	if s.m == nil {
		s.m = metrics.NewDiscard()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.bus == nil {
		s.bus = bus.NewMemory(nil, s.m)
	}
	if s.drainHint <= 0 {
		s.drainHint = retryhint.DefaultBase
	}
	if s.refreshNotice <= 0 {
		s.refreshNotice = 30 * time.Second
	}
	s.instanceID = deps.InstanceID
	if s.instanceID == "" {
		s.instanceID = instance.NewID()
	}
	// Keepalive steps due within 1/32 of the interval fire together: one
	// timer round per 0.8 s at the default 25 s, however many connections.
	s.pings = deadlines.New(cfg.PingInterval/32, func(c *conn) *deadlines.Handle { return &c.pingAt }, (*conn).keepalive)
	s.expiries = newExpiryHeap()
	var err error
	if s.presence, err = s.newTracker(deps.Presence); err != nil {
		return nil, fmt.Errorf("server: presence: %w", err)
	}
	s.hub.init(s, deps.Subscribers)
	if s.hist, err = newHistoryState(s, deps); err != nil {
		return nil, fmt.Errorf("server: history: %w", err)
	}
	return s, nil
}

// Start connects the bus; messages from other instances reach local
// subscribers from then on.
func (s *Server) Start(ctx context.Context) error {
	if err := s.bus.Start(ctx, (*busReceiver)(s)); err != nil {
		return fmt.Errorf("server: start bus: %w", err)
	}
	s.hist.start()
	return s.presence.Start(ctx)
}

// Handle registers the handler of an application method. Built-in names
// (subscribe, unsubscribe, publish) cannot be taken.
func (s *Server) Handle(method string, h Handler) {
	if isBuiltin(method) {
		panic("server: " + method + " is a built-in method")
	}
	s.handlers.Store(method, h)
}

// Publish sends data (valid JSON) to every subscriber of topic, on this
// instance and, through the bus, on the others: what a client's publish
// does, for application handlers. It skips the message tier (the caller
// is trusted) and counts as a published message for PUBLISH_RATE. A bus
// error (bus.ErrQueueFull, bus.ErrDegraded) means it was delivered
// nowhere.
func (s *Server) Publish(topic string, data json.RawMessage) error {
	if msg := protocol.CheckTopic(topic); msg != "" {
		return errors.New("server: " + msg)
	}
	if !json.Valid(data) || !utf8.Valid(data) {
		return errors.New("server: data is not valid JSON in UTF-8")
	}
	data = compactData(data)
	if pol := s.hist.policyOf(topic); pol.Enabled() {
		_, err := s.hist.publish(context.Background(), topic, data, pol, "", nil)
		return err
	}
	// The bus first: what it refuses (full, or Redis down) is delivered
	// nowhere, and the caller hears why (docs/cluster.md).
	if err := s.bus.Publish(topic, data); err != nil {
		if s.pressure != nil {
			s.pressure.RecordBusShed()
		}
		return err
	}
	// Whether more publishes follow is unknown here (a handler in a
	// loop, the bus draining a backlog) and nothing would flush held
	// frames: a small topic's deliveries are written at once, a large
	// topic's go to writers on every core, never all through this one
	// goroutine.
	s.hub.publish(topic, data, nil)
	if s.pressure != nil {
		s.pressure.RecordPublished(1)
	}
	return nil
}

// Counts reports open connections and subscriptions. The pressure
// monitor is told of each change as it happens (AddConnections,
// AddSubscriptions) and its samples read its own counts; subscriptions
// are counted there alone when there is a monitor, here otherwise.
func (s *Server) Counts() (connections, subscriptions int64) {
	s.mu.Lock()
	n := int64(len(s.conns))
	s.mu.Unlock()
	if s.pressure != nil {
		return n, s.pressure.Subscriptions()
	}
	return n, s.subscriptions.Load()
}

// addSubscriptions counts n subscriptions made (negative: ended): one
// atomic add, in the pressure monitor when there is one (Counts).
func (s *Server) addSubscriptions(n int64) {
	if s.pressure != nil {
		s.pressure.AddSubscriptions(n)
		return
	}
	s.subscriptions.Add(n)
}

// Subjects lists topics with local subscribers and their counts.
func (s *Server) Subjects() []bus.TopicCount { return s.hub.Subjects() }

// LocalSubscribers is the number of this instance's subscribers of topic.
func (s *Server) LocalSubscribers(topic string) int { return s.hub.Count(topic) }

// Draining reports whether Drain has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// Degraded reports whether cross-instance delivery is down now.
func (s *Server) Degraded() bool { return s.bus.Degraded() }

// Topics is the number of topics with at least one subscriber on this
// instance.
func (s *Server) Topics() int { return s.hub.topics() }

// Ready reports whether this instance should receive new connections: not
// draining and cross-instance delivery up.
func (s *Server) Ready() bool { return !s.draining.Load() && !s.bus.Degraded() }

// NotReady says why Ready is false, in the words /readyz answers with: ""
// when ready.
func (s *Server) NotReady() string {
	switch {
	case s.draining.Load():
		return "draining"
	case s.bus.Degraded():
		return "bus degraded (redis unreachable)"
	}
	return ""
}

// ServeHTTP serves GET /ws: the handshake tier, then the upgrade.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Shed upgrades are the common case in a storm: the connection struct
	// comes from a pool and goes back to it when the gate says no, so a
	// rejection allocates nothing here.
	c := connPool.Get().(*conn)
	c.s = s
	if s.gate != nil {
		if !s.gate.Admit(w, r, &c.ticket) {
			c.s = nil
			connPool.Put(c)
			return
		}
	} else if s.draining.Load() {
		retryhint.Answer(w, http.StatusServiceUnavailable, retryhint.HeadOverloaded, hintMillis(s.drainHint))
		return
	}
	var ws *websocket.Conn
	subprotocol := ""
	if dw, ok := w.(wsock.Acceptor); ok && !s.cfg.PortableSockets {
		// Read by the door, or made in process on an in-memory socket (an
		// event stream's): wsock answers an upgrade the library would
		// accept, and the connection has no library object at all.
		if raw, sub, ok := dw.Accept(r, subprotocols); ok {
			if raw == nil {
				c.ticket.HandshakeDone(false)
				return
			}
			c.raw, subprotocol = raw, sub
		}
	}
	if c.raw == nil {
		uw := &wsock.Upgrade{ResponseWriter: w, Portable: s.cfg.PortableSockets}
		var err error
		ws, err = websocket.Accept(uw, r, &websocket.AcceptOptions{
			Subprotocols:       subprotocols,
			InsecureSkipVerify: true, // the gate checked the origin
			OnPongReceived:     uw.OnPong,
		})
		uw.ResponseWriter = nil // OnPong keeps uw: it must not keep net/http's request state
		if err != nil {
			c.ticket.HandshakeDone(false)
			return
		}
		c.raw = uw.Conn
		c.raw.Accepted()
		subprotocol = ws.Subprotocol()
	}
	c.raw.SetOwner(c)
	c.ctx.values = connValues(r)
	c.ticket.HandshakeDone(true)
	if !c.start(ws, subprotocol) {
		return
	}
	if c.raw.Native() {
		// This goroutine (the door's, or net/http's) is done with the
		// request: it reads on, and ends as soon as the connection parks
		// (at once for a client that sends nothing yet). A goroutine of
		// its own for that first look cost every upgrade a goroutine's
		// start and a stack that grew again.
		c.readFrom(parkFirst)
		return
	}
	go c.readLoop()
}

// subprotocols are the WebSocket subprotocols the server speaks, in the
// order it prefers them (docs/protocol.md).
var subprotocols = []string{protocol.BatchSubprotocol, protocol.BinarySubprotocol}

// millis is a millisecond clock for the keepalive's checks
// (wsock.Conn.MessageOverdue), wrapping at 2^31.
func (s *Server) millis() uint32 { return uint32(time.Since(s.epoch) / time.Millisecond) }

// connPool holds connection structs that were never used: only a rejected
// upgrade's struct goes back (the gate released its ticket; nothing else
// refers to it). An admitted connection's struct is never reused.
var connPool = sync.Pool{New: func() any { return new(conn) }}

// busReceiver adapts the server to bus.Receiver.
type busReceiver Server

func (r *busReceiver) Deliver(topic string, data []byte) { r.deliver(topic, data, nil) }

// Holder gives one bus receive worker its own holdSet (write.go): its
// deliveries are held while it has more messages in hand and written, one
// write per subscriber, when its queue is empty (bus.HoldingReceiver).
func (r *busReceiver) Holder() bus.Holder { return &busHolder{r: r, held: new(holdSet)} }

type busHolder struct {
	r    *busReceiver
	held *holdSet
}

func (h *busHolder) Deliver(topic string, data []byte) { h.r.deliver(topic, data, h.held) }

func (h *busHolder) Flush() {
	if h.held.pending() {
		h.held.flush()
	}
}

func (r *busReceiver) deliver(topic string, data []byte, held *holdSet) {
	s := (*Server)(r)
	if s.hist.policyOf(topic).Enabled() {
		// A history topic never delivers a message without an offset
		// (one from an instance whose config has no history for it).
		s.m.BusDropped.WithLabelValues(bus.DropMalformed).Inc()
		return
	}
	if s.pressure != nil {
		s.pressure.RecordPublished(1)
	}
	// Without a holder (the memory bus) nothing would flush held frames:
	// a small topic's deliveries are written at once, a large topic's go
	// to writers on every core. A Redis receive worker's holder flushes
	// whenever the worker's queue is empty.
	s.hub.publish(topic, data, held)
}

func (r *busReceiver) BusState(degraded bool) {
	s := (*Server)(r)
	event := protocol.EventRecovered
	if degraded {
		event = protocol.EventDegraded
		s.log.Warn("cross-instance delivery is down")
	} else {
		s.log.Info("cross-instance delivery recovered")
		// History topics repair what passed by meanwhile (history.go).
		s.hist.checkAll()
	}
	// The state and the audience are read together, so that a connection
	// is told each change once, in order: either addConn saw the state
	// (and told it), or it is in this snapshot.
	s.mu.Lock()
	s.busDown = degraded
	conns := s.snapshotConnsLocked()
	s.mu.Unlock()
	s.sendEach(conns, frameText(protocol.AppendSystem(nil, event, 0)))
}

// degradedFrame tells a client that cross-instance delivery is down.
var degradedFrame = frameText(protocol.AppendSystem(nil, protocol.EventDegraded, 0))

// sendEach sends one frame to each of conns.
func (s *Server) sendEach(conns []*conn, frame []byte) {
	for _, c := range conns {
		if c.enqueueFrame(frame, true) {
			s.m.MessagesSent.Inc()
		}
	}
}

func (s *Server) snapshotConns() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotConnsLocked()
}

func (s *Server) snapshotConnsLocked() []*conn {
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// addConn registers c. A user's first connection here declares this
// instance's interest in the user's control messages (control.go), after
// s.mu is released: a sharded bus may wait for Redis to confirm.
func (s *Server) addConn(c *conn) bool {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return false
	}
	s.conns[c] = struct{}{}
	if s.pressure != nil {
		s.pressure.AddConnections(1)
	}
	first := s.indexUser(c)
	if s.busDown {
		// Under s.mu (before conn.mu, as the lock order allows), so that
		// a recovery broadcast cannot overtake it; queued for the writer,
		// never written here.
		if c.enqueueFrame(degradedFrame, false) {
			s.m.MessagesSent.Inc()
		}
	}
	s.mu.Unlock()
	if first {
		s.bus.Subscribe(bus.UserKey(c.ticket.User))
	}
	return true
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	last := s.unindexUser(c)
	s.mu.Unlock()
	if s.pressure != nil {
		s.pressure.AddConnections(-1)
	}
	if last {
		s.bus.Unsubscribe(bus.UserKey(c.ticket.User))
	}
}

// Drain refuses new upgrades, tells every client it is draining, and closes
// the connections with 1012 spread evenly over d, so a restart does not turn
// into a reconnect storm. It returns when every connection is closed or ctx
// ends (then the rest are closed at once, with 1001).
func (s *Server) Drain(ctx context.Context, d time.Duration) {
	s.draining.Store(true)
	if s.gate != nil {
		s.gate.SetDraining(true)
	}
	conns := s.snapshotConns()
	n := len(conns)
	if n == 0 {
		return
	}
	rand.Shuffle(n, func(i, j int) { conns[i], conns[j] = conns[j], conns[i] })
	at := drainSchedule(n, d)
	// Each client learns when it will be closed, so one that reconnects on
	// its own does so spread over the window too.
	for i, c := range conns {
		hint := at[i] + retryhint.Jitter(s.drainHint/2, s.drainHint)
		c.enqueue(protocol.AppendSystem(nil, protocol.EventDraining, hint.Milliseconds()))
	}
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var closing sync.WaitGroup
	for i, c := range conns {
		if wait := time.Until(start.Add(at[i])); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				// Hard stop: close the rest now (1001), without waiting
				// for their close handshakes.
				s.goAway(conns[i:])
				return
			}
		}
		s.drainClose(c, &closing, start.Add(d))
	}
	// Wait for the last close handshakes, so a Shutdown right after the
	// drain does not cut a 1012 off before the client has read it.
	done := make(chan struct{})
	go func() { closing.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// drainSchedule spreads n closes evenly over d: the i-th at i*d/n.
func drainSchedule(n int, d time.Duration) []time.Duration {
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = d * time.Duration(i) / time.Duration(n)
	}
	return at
}

// drainClose closes c with 1012 after its queued frames (the draining
// notice) are written, without holding up the drain schedule. The wait
// for the client's answer ends by the end of the drain (by): a client
// that never answers holds the stop no longer than drain.duration
// (docs/operations.md, "Drain and rolling deploys").
func (s *Server) drainClose(c *conn, done *sync.WaitGroup, by time.Time) {
	c.closeLaterBy(websocket.StatusServiceRestart, retryhint.Reason(hintMillis(s.drainHint)), true, done, by)
}

// closeWait bounds Close's wait for the connections' goroutines.
const closeWait = 10 * time.Second

// Close is Shutdown bounded by closeWait: it closes what a drain left
// open at once.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	return s.Shutdown(ctx)
}

// Shutdown closes every connection at once (1001, going away) and waits
// for their goroutines, then stops the bus.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed.Store(true)
	s.mu.Unlock()
	s.goAway(s.snapshotConns())
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.pings.Stop()
	s.expiries.Stop()
	s.poller.stop()
	// After the connections (their leaves are among what it sends), before
	// the bus (which carries its last diffs).
	err = errors.Join(err, s.presence.Close())
	if berr := s.bus.Close(); berr != nil && !errors.Is(berr, bus.ErrClosed) {
		err = errors.Join(err, berr)
	}
	// After the bus: nothing delivers to the sequencers any more.
	s.hist.close()
	return err
}

// goAway closes conns at once with 1001, each bounded by a short wait for
// its socket, all at the same time: a stalled client never holds up the
// others. A close already under way (a drain's 1012) keeps its frame; the
// socket is closed under it.
func (s *Server) goAway(conns []*conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(c.goAway)
	}
	wg.Wait()
}

// hintMillis is a retry hint around base: uniform over [base/2, 3*base/2)
// in whole milliseconds, at least 1.
func hintMillis(base time.Duration) int64 {
	return retryhint.Millis(retryhint.Jitter(base/2, base))
}
