package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/protocol"
)

// testServer speaks the subset of rtserver's protocol the client needs:
// subscribe/unsubscribe/publish with local fan-out, plus test methods:
//
//	echo   result = params (answered from its own goroutine, so responses
//	       to concurrent calls come back in any order)
//	fail   -32001 with data {class, reason, retryAfterMs}
//	gate   answered only after a later "open" call
//	open   releases one gate; open's response is written before gate's
//	hang   never answered; signals hung
//	burst  {topic, n}: n message notifications plus the response, in one
//	       array frame (needs rt.batch)
//	refresh  {token}: recorded; answers {"expiresAt":null}
//
// and subscribing to a topic starting with "secret" answers -32003.
type testServer struct {
	t   *testing.T
	srv *httptest.Server
	url string

	gate chan chan struct{}
	hung chan struct{}

	mu         sync.Mutex
	conns      map[*tconn]struct{}
	topics     map[string]map[*tconn]struct{}
	subscribes map[string]int
	headers    []http.Header
	refreshes  chan string // tokens of refresh calls
	// reject, when set, may answer the upgrade request itself (returning
	// true): how tests produce 503, 429, 401.
	reject func(w http.ResponseWriter, r *http.Request) bool
	// closeAfterAccept, when set, closes every new connection right after
	// the upgrade (handshake shed in close mode).
	closeAfterAccept *websocket.CloseError
	// keys lists the idempotencyKey of every publish, in arrival order;
	// while lose > 0, a publish is recorded and its connection dropped
	// without an answer (and lose counts down).
	keys []string
	lose int
}

type tconn struct {
	ws    *websocket.Conn
	batch bool
}

func newTestServer(t *testing.T) *testServer {
	s := &testServer{
		t:          t,
		gate:       make(chan chan struct{}),
		hung:       make(chan struct{}, 16),
		conns:      map[*tconn]struct{}{},
		topics:     map[string]map[*tconn]struct{}{},
		subscribes: map[string]int{},
		refreshes:  make(chan string, 16),
	}
	s.srv = httptest.NewServer(s)
	s.url = "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/ws"
	t.Cleanup(func() {
		s.closeAll(websocket.StatusGoingAway, "")
		s.srv.Close()
	})
	return s
}

func (s *testServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	reject, closeAfter := s.reject, s.closeAfterAccept
	s.mu.Unlock()
	if reject != nil && reject(w, r) {
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{protocol.BatchSubprotocol}})
	if err != nil {
		return
	}
	if closeAfter != nil {
		ws.Close(closeAfter.Code, closeAfter.Reason)
		return
	}
	tc := &tconn{ws: ws, batch: ws.Subprotocol() == protocol.BatchSubprotocol}
	s.mu.Lock()
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, tc)
		for _, m := range s.topics {
			delete(m, tc)
		}
		s.mu.Unlock()
		ws.CloseNow()
	}()
	ctx := context.Background()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		frame, perr := protocol.Decode(b)
		if perr != nil {
			ws.Write(ctx, websocket.MessageText, protocol.AppendError(nil, nil, perr))
			continue
		}
		for _, req := range frame.Requests {
			s.handle(tc, req)
		}
	}
}

func (s *testServer) handle(tc *tconn, req protocol.Request) {
	ctx := context.Background()
	reply := func(result json.RawMessage, e *protocol.Error) {
		if req.IsNotification() {
			return
		}
		var b []byte
		if e != nil {
			b = protocol.AppendError(nil, req.ID, e)
		} else {
			b = protocol.AppendResult(nil, req.ID, result)
		}
		tc.ws.Write(ctx, websocket.MessageText, b)
	}
	switch req.Method {
	case "subscribe", "unsubscribe":
		p, e := protocol.DecodeTopicParams(req.Params, false)
		if e != nil {
			reply(nil, e)
			return
		}
		s.mu.Lock()
		if req.Method == "subscribe" {
			s.subscribes[p.Topic]++
			if strings.HasPrefix(p.Topic, "secret") {
				s.mu.Unlock()
				reply(nil, protocol.NewError(protocol.CodeForbidden, "", map[string]string{"topic": p.Topic}))
				return
			}
			if s.topics[p.Topic] == nil {
				s.topics[p.Topic] = map[*tconn]struct{}{}
			}
			s.topics[p.Topic][tc] = struct{}{}
		} else {
			delete(s.topics[p.Topic], tc)
		}
		s.mu.Unlock()
		reply(nil, nil)
	case "publish":
		p, e := protocol.DecodeTopicParams(req.Params, true)
		if e != nil {
			reply(nil, e)
			return
		}
		var k struct {
			Key string `json:"idempotencyKey"`
		}
		json.Unmarshal(req.Params, &k)
		s.mu.Lock()
		s.keys = append(s.keys, k.Key)
		lose := s.lose > 0
		if lose {
			s.lose--
		}
		s.mu.Unlock()
		if lose {
			tc.ws.CloseNow()
			return
		}
		frame := protocol.AppendMessage(nil, p.Topic, p.Data)
		s.mu.Lock()
		subs := make([]*tconn, 0, len(s.topics[p.Topic]))
		for c := range s.topics[p.Topic] {
			subs = append(subs, c)
		}
		s.mu.Unlock()
		for _, c := range subs {
			c.ws.Write(ctx, websocket.MessageText, frame)
		}
		reply(nil, nil)
	case "echo":
		go reply(req.Params, nil)
	case "refresh":
		var p struct {
			Token string `json:"token"`
		}
		json.Unmarshal(req.Params, &p)
		s.refreshes <- p.Token
		reply(json.RawMessage(`{"expiresAt":null}`), nil)
	case "fail":
		reply(nil, protocol.NewError(protocol.CodeOverloaded, "", protocol.OverloadedData{Class: "chat", Reason: "MEMORY", RetryAfterMs: 250}))
	case "gate":
		go func() {
			opened := <-s.gate
			<-opened // open's response is written first
			reply(json.RawMessage(`{"gated":true}`), nil)
		}()
	case "open":
		go func() {
			opened := make(chan struct{})
			s.gate <- opened
			reply(nil, nil)
			close(opened)
		}()
	case "hang":
		s.hung <- struct{}{}
	case "burst":
		var p struct {
			Topic string `json:"topic"`
			N     int    `json:"n"`
		}
		json.Unmarshal(req.Params, &p)
		if !tc.batch {
			reply(nil, protocol.NewError(protocol.CodeInvalidRequest, "rt.batch not negotiated", nil))
			return
		}
		b := []byte{'['}
		for i := range p.N {
			b = protocol.AppendMessage(b, p.Topic, json.RawMessage(`{"seq":`+itoa(i)+`}`))
			b = append(b, ',')
		}
		b = protocol.AppendResult(b, req.ID, json.RawMessage(`{"n":`+itoa(p.N)+`}`))
		b = append(b, ']')
		tc.ws.Write(ctx, websocket.MessageText, b)
	default:
		reply(nil, protocol.NewError(protocol.CodeMethodNotFound, "", nil))
	}
}

// broadcast writes a raw frame to every connection.
func (s *testServer) broadcast(frame []byte) {
	for _, c := range s.snapshot() {
		c.ws.Write(context.Background(), websocket.MessageText, frame)
	}
}

// closeAll closes every connection with code and reason.
func (s *testServer) closeAll(code websocket.StatusCode, reason string) {
	var wg sync.WaitGroup
	for _, c := range s.snapshot() {
		wg.Go(func() { c.ws.Close(code, reason) })
	}
	wg.Wait()
}

func (s *testServer) snapshot() []*tconn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*tconn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

func (s *testServer) setReject(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	s.reject = f
	s.mu.Unlock()
}

func (s *testServer) subscribeCount(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subscribes[topic]
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// checkLeaks fails the test if goroutines of this package's Client (or its
// connections) are still running when the test ends. Registered first, it
// runs after every other cleanup. Goroutines exit asynchronously after the
// last Close of the test server, so it polls until a deadline.
func checkLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			leaked := clientGoroutines()
			if leaked == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left running:\n%s", leaked)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func clientGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "rtserver/client.(*Client)") || strings.Contains(g, "rtserver/client.(*conn)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
