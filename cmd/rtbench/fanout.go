package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/ctxsleep"
	"github.com/rtserver/rtserver/protocol"
)

type fanoutConfig struct {
	URL       *url.URL      // where the subscribers connect
	PubURL    *url.URL      // where the publishers connect; nil: URL
	P, S, T   int           // publishers, subscribers, topics
	Size      int           // approximate bytes of each message's data
	Duration  time.Duration // publishing time
	Rate      float64       // publishes/s over all publishers; 0 = as fast as the window allows
	Window    int           // publishes in flight per publisher (default 64)
	Batch     bool          // subscribers offer the rt.batch subprotocol
	Data      string        // json, bytes or base64 (binary.go)
	OwnTopics bool          // publisher j publishes only to topic j mod T (many rooms, one publisher each)
	// Raw has the subscribers and publishers read and write their sockets
	// without the WebSocket library (rawconn.go), where the target allows
	// (rawAllowed): the generator then takes less of the machine from the
	// server. Off by default, so that comparisons with other servers,
	// whose clients go through the library, stay like for like.
	Raw         bool
	C           int // dialers in parallel while connecting
	DialTimeout time.Duration
	ServerPID   int
	// PubServerPID is the publishers' instance, when it is another one:
	// its CPU is reported apart (pubServerCpuSeconds).
	PubServerPID int
	// CPUProfile and MemProfile, when set, are where rtbench writes its
	// own CPU profile and allocations over the publishing time and the
	// drain (selfprof.go).
	CPUProfile, MemProfile string
}

type fanoutResult struct {
	URL         string `json:"url"`
	PubURL      string `json:"pubUrl,omitempty"`
	Publishers  int    `json:"publishers"`
	Subscribers int    `json:"subscribers"`
	Topics      int    `json:"topics"`
	Size        int    `json:"dataBytes"`
	Batch       bool   `json:"batch"`
	Data        string `json:"data"`
	OwnTopics   bool   `json:"ownTopics"`
	// BatchNegotiated counts subscribers whose server accepted rt.batch.
	BatchNegotiated int            `json:"batchNegotiated"`
	Published       int64          `json:"publishedOK"`
	PublishErrors   map[string]int `json:"publishErrors,omitempty"`
	Expected        int64          `json:"expectedDeliveries"`
	Delivered       int64          `json:"delivered"`
	Frames          int64          `json:"frames"`
	Seconds         float64        `json:"seconds"` // first publish to last delivery
	PublishPerSec   float64        `json:"publishedPerSec"`
	DeliveredPerSec float64        `json:"deliveredPerSec"`
	MsgsPerFrame    float64        `json:"messagesPerFrame"`
	Latency         latency        `json:"latency"`
	SubsClosed      map[string]int `json:"subscribersClosed,omitempty"`
	ServerCPU       float64        `json:"serverCpuSeconds,omitempty"`
	ServerUser      float64        `json:"serverUserSeconds,omitempty"`
	ServerSys       float64        `json:"serverSysSeconds,omitempty"`
	CPUPerMillion   float64        `json:"serverCpuSecondsPerMillionDelivered,omitempty"`
	// Missing is what was owed and never arrived: deliveries of
	// acknowledged publishes minus deliveries.
	Missing      int64   `json:"missingDeliveries"`
	PubServerCPU float64 `json:"pubServerCpuSeconds,omitempty"`
	ClientCPU    float64 `json:"rtbenchCpuSeconds"`
	// WireBytes is what the subscribers read, frame headers included;
	// per delivery in WireBytesPerDelivery.
	WireBytes            int64   `json:"subscriberWireBytes"`
	WireBytesPerDelivery float64 `json:"wireBytesPerDelivery"`
}

// tsKey marks the send time embedded in each message's data; subscribers
// find it by scanning frames instead of decoding them, so the load
// generator spends its share of the two cores on sockets, not JSON.
const tsKey = `"rtbts":`

// payload renders a message's data: the send time in nanoseconds since
// base, padded to about size bytes.
func payload(ts int64, size int) []byte {
	return appendPayload(make([]byte, 0, size+32), ts, size)
}

// appendPayload appends payload(ts, size) to b.
func appendPayload(b []byte, ts int64, size int) []byte {
	start := len(b)
	b = append(b, '{')
	b = append(b, tsKey...)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, `,"pad":"`...)
	for n := size - (len(b) - start) - 2; n > 0; n-- {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// scanTimestamps calls f with every timestamp in a frame (one message, or
// an rt.batch array of them) and returns how many it found.
func scanTimestamps(b []byte, f func(ts int64)) int {
	n := 0
	for {
		i := indexTsKey(b)
		if i < 0 {
			return n
		}
		b = b[i+len(tsKey):]
		var v int64
		j := 0
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			v = v*10 + int64(b[j]-'0')
		}
		if j > 0 {
			f(v)
			n++
		}
		b = b[j:]
	}
}

// tsKeyTail is tsKey without its opening quote: its first byte, r, is
// rarer in a message than the quote, which bytes.Index would otherwise
// stop at some twenty times a message before it finds the key.
var tsKeyTail = []byte(tsKey[1:])

// indexTsKey is bytes.Index(b, tsKey).
func indexTsKey(b []byte) int {
	for off := 0; ; {
		i := bytes.Index(b[off:], tsKeyTail)
		if i < 0 {
			return -1
		}
		if j := off + i; j > 0 && b[j-1] == '"' {
			return j - 1
		}
		off += i + 1
	}
}

func fanoutTopic(t int) string {
	return "rtbench.fan." + strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(t)
}

// dialMany opens n connections with c dialers; on any failure it closes
// what it opened.
func dialMany(ctx context.Context, d *dialer, n, c int, timeout time.Duration, setup func(i int, conn *websocket.Conn) error) ([]*websocket.Conn, error) {
	dial := func(ctx context.Context) (*websocket.Conn, error) {
		conn, _, err := d.dial(ctx)
		return conn, err
	}
	return dialEach(ctx, n, c, timeout, dial, setup, func(open []*websocket.Conn) { closeAll(open, 256) })
}

// dialEach is dialMany for any kind of connection: dial opens one,
// closeAll closes those opened when one fails.
func dialEach[T comparable](ctx context.Context, n, c int, timeout time.Duration, dial func(context.Context) (T, error), setup func(i int, conn T) error, closeAll func([]T)) ([]T, error) {
	conns := make([]T, n)
	var zero T
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range max(1, min(c, n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				dctx, cancel := context.WithTimeout(ctx, timeout)
				conn, err := dial(dctx)
				cancel()
				if err == nil {
					conns[i] = conn
					err = setup(i, conn)
				}
				if err != nil {
					once.Do(func() { first = fmt.Errorf("connection %d: %w", i, err) })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		var open []T
		for _, c := range conns {
			if c != zero {
				open = append(open, c)
			}
		}
		closeAll(open)
		return nil, first
	}
	return conns, nil
}

func runFanout(ctx context.Context, cfg fanoutConfig) (*fanoutResult, error) {
	if cfg.P <= 0 || cfg.S <= 0 || cfg.T <= 0 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("fanout: -p, -s, -t and --duration must be positive")
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.C <= 0 {
		cfg.C = 100
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.PubURL == nil {
		cfg.PubURL = cfg.URL
	}
	if cfg.Data == "" {
		cfg.Data = dataJSON
	}
	if err := checkData(cfg.Data); err != nil {
		return nil, err
	}
	setDataMode(cfg.Data)
	setSelfProfileRate(cfg.MemProfile)
	res := &fanoutResult{URL: cfg.URL.String(), Publishers: cfg.P, Subscribers: cfg.S, Topics: cfg.T, Size: cfg.Size, Batch: cfg.Batch, Data: cfg.Data, OwnTopics: cfg.OwnTopics}
	subsOf := make([]int64, cfg.T)
	for i := range cfg.S {
		subsOf[i%cfg.T]++
	}
	base := time.Now()

	// Subscribers.
	var proto []string
	if cfg.Batch {
		proto = []string{protocol.BatchSubprotocol}
	}
	if binaryMode.Load() {
		proto = []string{protocol.BinarySubprotocol}
	}
	var (
		delivered, frames atomic.Int64
		wire              atomic.Int64
		lastDelivery      atomic.Int64 // ns since base
		stopping          atomic.Bool
		mu                sync.Mutex
		lat               hist
		closed            = map[string]int{}
		readers           sync.WaitGroup
		negotiated        atomic.Int64
	)
	// lost records a subscriber's end before the run stopped: its close
	// code, or "error".
	lost := func(code int) {
		if stopping.Load() {
			return
		}
		k := "error"
		if code != -1 {
			k = strconv.Itoa(code)
		}
		mu.Lock()
		closed[k]++
		mu.Unlock()
	}
	// record counts the deliveries in one frame (wireLen bytes on the
	// wire) that a subscriber had in hand at now.
	record := func(h *hist, b []byte, wireLen int, now int64) {
		n := scanDelivery(b, func(ts int64) { h.RecordNs(now - ts) })
		if n > 0 {
			wire.Add(int64(wireLen))
			delivered.Add(int64(n))
			frames.Add(1)
			lastDelivery.Store(now)
		}
	}
	merge := func(h *hist) {
		mu.Lock()
		lat.Merge(h)
		mu.Unlock()
	}
	subscriber := func(c *libConn) {
		defer readers.Done()
		var h hist
		defer merge(&h)
		var m msgBuf
		for {
			_, b, err := m.read(context.Background(), c.ws)
			if err != nil {
				lost(int(websocket.CloseStatus(err)))
				return
			}
			if serverPing(c.ws, b) {
				continue
			}
			record(&h, b, wireBytes(len(b)), c.nc.arrived(base))
		}
	}
	rawSubscriber := func(s *rawConn) {
		defer readers.Done()
		var h hist
		defer merge(&h)
		for {
			b, n, err := s.next()
			if err != nil {
				var ce errClosed
				if !errors.As(err, &ce) {
					ce.code = -1
				}
				lost(ce.code)
				return
			}
			record(&h, b, n, int64(s.at.Sub(base)))
		}
	}
	var (
		subs []*websocket.Conn
		raws []*rawConn
		err  error
	)
	if d := newDialer(cfg.URL, proto); cfg.Raw && rawAllowed(cfg.URL) {
		dial := func(ctx context.Context) (*rawConn, error) { return rawDial(ctx, d, cfg.URL, proto) }
		raws, err = dialEach(ctx, cfg.S, cfg.C, cfg.DialTimeout, dial, func(i int, s *rawConn) error {
			if s.proto == protocol.BatchSubprotocol {
				negotiated.Add(1)
			}
			if err := s.subscribe(ctx, 1, fanoutTopic(i%cfg.T)); err != nil {
				return err
			}
			readers.Add(1)
			go rawSubscriber(s)
			return nil
		}, closeRaw)
	} else {
		dial := func(ctx context.Context) (*libConn, error) { return d.dialBuffered(ctx, libReadBuf) }
		var lcs []*libConn
		lcs, err = dialEach(ctx, cfg.S, cfg.C, cfg.DialTimeout, dial, func(i int, c *libConn) error {
			if c.ws.Subprotocol() == protocol.BatchSubprotocol {
				negotiated.Add(1)
			}
			if err := subscribeSync(ctx, c.ws, 1, fanoutTopic(i%cfg.T)); err != nil {
				return err
			}
			readers.Add(1)
			go subscriber(c)
			return nil
		}, closeLib)
		subs = wsOf(lcs)
	}
	if err != nil {
		readers.Wait()
		return nil, fmt.Errorf("subscribers: %w", err)
	}
	res.BatchNegotiated = int(negotiated.Load())
	if cfg.PubURL != cfg.URL {
		res.PubURL = cfg.PubURL.String()
	}
	all := subs
	defer func() {
		stopping.Store(true)
		closeAll(all, 256)
		closeRaw(raws)
		readers.Wait()
	}()

	// Publishers.
	var pubProto []string
	if binaryMode.Load() {
		pubProto = []string{protocol.BinarySubprotocol}
	}
	var pubs []pubConn
	if d := newDialer(cfg.PubURL, pubProto); cfg.Raw && rawAllowed(cfg.PubURL) {
		dial := func(ctx context.Context) (*rawConn, error) { return rawDial(ctx, d, cfg.PubURL, pubProto) }
		rp, err := dialEach(ctx, cfg.P, cfg.C, cfg.DialTimeout, dial, func(int, *rawConn) error { return nil }, closeRaw)
		if err != nil {
			return nil, fmt.Errorf("publishers: %w", err)
		}
		raws = append(raws, rp...)
		for _, r := range rp {
			pubs = append(pubs, r)
		}
	} else {
		// A publisher's answers (64 in flight: about 3 KiB) fit the
		// library's own reader: no read buffer under it.
		dial := func(ctx context.Context) (*libConn, error) { return d.dialBuffered(ctx, 0) }
		conns, err := dialEach(ctx, cfg.P, cfg.C, cfg.DialTimeout, dial, func(int, *libConn) error { return nil }, closeLib)
		if err != nil {
			return nil, fmt.Errorf("publishers: %w", err)
		}
		all = append(all, wsOf(conns)...)
		for _, c := range conns {
			pubs = append(pubs, libPub{c})
		}
	}

	var (
		published, expected atomic.Int64
		pubErrs             = map[string]int{}
		stop                = make(chan struct{})
		pubWG               sync.WaitGroup
	)
	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	pubCPU, err := startCPU(cfg.PubServerPID)
	if err != nil {
		return nil, fmt.Errorf("publishers' server cpu: %w", err)
	}
	prof, err := startSelfProfile(cfg.CPUProfile, cfg.MemProfile)
	if err != nil {
		return nil, fmt.Errorf("rtbench profile: %w", err)
	}
	defer prof.stop()
	selfCPU, _ := startCPU(selfPID())
	start := time.Now()
	for j, c := range pubs {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			publisher(ctx, c, j, cfg, base, subsOf, stop, &published, &expected, &mu, pubErrs)
		}()
	}
	ctxsleep.Sleep(ctx, cfg.Duration)
	close(stop)
	pubWG.Wait() // every publisher has its answers (or gave up on them)

	// Drain: wait until every expected delivery arrived, or until no
	// progress for 2 s (a message was lost, or a subscriber was closed).
	last, lastChange := delivered.Load(), time.Now()
	for delivered.Load() < expected.Load() && time.Since(lastChange) < 2*time.Second && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		if n := delivered.Load(); n != last {
			last, lastChange = n, time.Now()
		}
	}
	if used, ok, err := cpu.stop(); err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	} else if ok {
		res.ServerCPU, res.ServerUser, res.ServerSys = used.Total().Seconds(), used.User.Seconds(), used.Sys.Seconds()
	}
	if used, ok, err := pubCPU.stop(); err != nil {
		return nil, fmt.Errorf("publishers' server cpu: %w", err)
	} else if ok {
		res.PubServerCPU = used.Total().Seconds()
	}
	if used, ok, _ := selfCPU.stop(); ok {
		res.ClientCPU = used.Total().Seconds()
	}
	if err := prof.stop(); err != nil {
		return nil, fmt.Errorf("rtbench profile: %w", err)
	}
	stopping.Store(true)
	closeAll(all, 256)
	closeRaw(raws)
	readers.Wait()
	all, raws = nil, nil

	res.Published = published.Load()
	res.Expected = expected.Load()
	res.Delivered = delivered.Load()
	res.Missing = max(0, res.Expected-res.Delivered)
	res.Frames = frames.Load()
	res.WireBytes = wire.Load()
	if res.Delivered > 0 {
		res.WireBytesPerDelivery = float64(res.WireBytes) / float64(res.Delivered)
	}
	end := base.Add(time.Duration(lastDelivery.Load()))
	if end.Before(start) {
		end = time.Now()
	}
	res.Seconds = end.Sub(start).Seconds()
	if res.Seconds > 0 {
		res.PublishPerSec = float64(res.Published) / res.Seconds
		res.DeliveredPerSec = float64(res.Delivered) / res.Seconds
	}
	if res.Frames > 0 {
		res.MsgsPerFrame = float64(res.Delivered) / float64(res.Frames)
	}
	res.Latency = lat.Summary()
	res.PublishErrors = nonEmpty(pubErrs)
	res.SubsClosed = nonEmpty(closed)
	if res.ServerCPU > 0 && res.Delivered > 0 {
		res.CPUPerMillion = res.ServerCPU / float64(res.Delivered) * 1e6
	}
	return res, nil
}

// topicOf is the topic of publisher j's publish id: round-robin over the
// topics starting at topic j, or always topic j with OwnTopics.
func topicOf(cfg fanoutConfig, j int, id uint64) int {
	if cfg.OwnTopics {
		return j % cfg.T
	}
	return int((id + uint64(j)) % uint64(cfg.T))
}

// publisher j publishes round-robin over the topics (starting at topic j)
// with at most cfg.Window publishes unanswered, paced to its share of
// cfg.Rate, until stop; then it waits (at most 10 s) for the answers.
func publisher(ctx context.Context, c pubConn, j int, cfg fanoutConfig, base time.Time, subsOf []int64, stop <-chan struct{}, published, expected *atomic.Int64, mu *sync.Mutex, errs map[string]int) {
	defer c.done()
	window := make(chan struct{}, cfg.Window)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		c.answers(func(id uint64, code int, failed bool) {
			if failed {
				mu.Lock()
				errs[strconv.Itoa(code)]++
				mu.Unlock()
			} else {
				published.Add(1)
				expected.Add(subsOf[topicOf(cfg, j, id)])
			}
			select {
			case <-window:
			default:
			}
		})
	}()
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(cfg.P) / cfg.Rate)
	}
	next := time.Now().Add(interval * time.Duration(j) / time.Duration(cfg.P))
	topics := make([][]byte, cfg.T)
	for t := range topics {
		topics[t] = []byte(`{"topic":` + strconv.Quote(fanoutTopic(t)) + `,"data":`)
	}
	var params, data, req []byte // reused: a publish's write has returned before the next is rendered
loop:
	for id := uint64(0); ; id++ {
		select {
		case window <- struct{}{}:
		case <-stop:
			break loop
		}
		if interval > 0 {
			if wait := time.Until(next); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-stop:
					t.Stop()
					<-window // the slot taken for a publish never sent
					break loop
				}
			}
			next = next.Add(interval)
		}
		data = appendPayload(data[:0], int64(time.Since(base)), cfg.Size)
		params = append(params[:0], topics[topicOf(cfg, j, id)]...)
		params = append(params, dataOf(data)...)
		params = append(params, '}')
		req = appendRequest(req[:0], id, protocol.MethodPublish, params)
		if err := c.publish(ctx, req); err != nil {
			mu.Lock()
			errs["write: "+errKind(err)]++
			mu.Unlock()
			<-window
			break
		}
	}
	// Wait for the answers to what is in flight.
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for len(window) > 0 {
		select {
		case <-answered:
			return
		case <-deadline.C:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// pubConn is a publisher's connection: through the WebSocket library, or
// raw (rawconn.go).
type pubConn interface {
	// answers calls fn with each answer's id, and its error code when
	// failed, until the connection ends.
	answers(fn func(id uint64, code int, failed bool))
	// publish sends one request as one text frame.
	publish(ctx context.Context, req []byte) error
	// done is called once the publisher has stopped publishing.
	done()
}

// answerOf hands fn a decoded frame that is an answer.
func answerOf(f frame, fn func(id uint64, code int, failed bool)) {
	switch {
	case f.ID == nil:
	case f.Error != nil:
		fn(*f.ID, f.Error.Code, true)
	default:
		fn(*f.ID, 0, false)
	}
}

// wsOf is the WebSockets of library clients.
func wsOf(cs []*libConn) []*websocket.Conn {
	ws := make([]*websocket.Conn, len(cs))
	for i, c := range cs {
		ws[i] = c.ws
	}
	return ws
}

// closeLib closes library clients as closeAll does.
func closeLib(cs []*libConn) { closeAll(wsOf(cs), 256) }
