package handshake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/handshake"
)

// A gate with room for one connection: the second upgrade is shed with 503,
// a Retry-After header and a JSON body carrying a jittered hint.
func ExampleGate() {
	cfg := handshake.DefaultConfig()
	cfg.MaxConnections = 1
	gate, err := handshake.New(cfg, handshake.Deps{})
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/ws", nil)

	var first handshake.Ticket
	fmt.Println("first admitted:", gate.Admit(httptest.NewRecorder(), r, &first))
	first.HandshakeDone(true) // websocket.Accept succeeded: the connection is open

	var second handshake.Ticket
	rec := httptest.NewRecorder()
	fmt.Println("second admitted:", gate.Admit(rec, r, &second))
	var body struct {
		Error        string `json:"error"`
		RetryAfterMs int64  `json:"retryAfterMs"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	fmt.Println(rec.Code, body.Error, rec.Header().Get("Retry-After") != "", body.RetryAfterMs > 0)

	first.Close() // the connection ended: its slot is free again
	fmt.Println("slots held:", gate.Open())
	// Output:
	// first admitted: true
	// second admitted: false
	// 503 OVERLOADED true true
	// slots held: 0
}

// The gate in front of a WebSocket endpoint of your own: Admit before
// websocket.Accept, HandshakeDone after it, Close when the connection ends.
func ExampleGate_Admit() {
	cfg := handshake.DefaultConfig()
	cfg.MaxConnections = 1
	gate, err := handshake.New(cfg, handshake.Deps{})
	if err != nil {
		panic(err)
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var t handshake.Ticket // caller-owned: admitting allocates nothing
		if !gate.Admit(w, r, &t) {
			return // answered: 503/429 (or 1013), 403, 401
		}
		defer t.Close()
		// The gate has checked the Origin already.
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		t.HandshakeDone(err == nil)
		if err != nil {
			return
		}
		<-release // serve the connection
		c.Close(websocket.StatusNormalClosure, "")
	}))
	defer srv.Close()
	defer close(release)

	ctx := context.Background()
	url := "ws" + srv.URL[len("http"):] + "/ws"
	c, _, err := websocket.Dial(ctx, url, nil)
	fmt.Println("first:", err == nil)
	_, resp, err := websocket.Dial(ctx, url, nil)
	fmt.Println("second:", err != nil, resp.StatusCode, resp.Header.Get("Content-Type"))
	c.CloseNow()
	// Output:
	// first: true
	// second: true 503 application/json
}

// The same endpoint served by the door: ServingListener wraps the TCP
// listener, sheds upgrades before any handler runs while a cap is full,
// and otherwise runs the handler for GET /ws itself, without net/http's
// per-connection buffers. Other paths still reach the http.Server.
func ExampleGate_ServingListener() {
	gate, err := handshake.New(handshake.DefaultConfig(), handshake.Deps{})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		var t handshake.Ticket
		if !gate.Admit(w, r, &t) {
			return
		}
		defer t.Close()
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		t.HandshakeDone(err == nil)
		if err != nil {
			return
		}
		_ = c.Write(context.Background(), websocket.MessageText, []byte("hello"))
		c.Close(websocket.StatusNormalClosure, "")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(gate.ServingListener(ln, "/ws", mux))
	defer srv.Close()

	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, "ws://"+ln.Addr().String()+"/ws", nil)
	if err != nil {
		panic(err)
	}
	_, msg, _ := c.Read(ctx)
	fmt.Println(string(msg))
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// hello
	// 200
}

// Behind a trusted proxy the client is the right-most X-Forwarded-For entry
// that is not itself a trusted proxy; an untrusted peer's header is ignored.
// IPv6 clients share a rate-limit key per /64.
func ExampleClientIP() {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	fmt.Println(handshake.ClientIP("10.1.2.3:5555", []string{"198.51.100.9, 203.0.113.7, 10.9.9.9"}, trusted))
	fmt.Println(handshake.ClientIP("192.0.2.44:5555", []string{"203.0.113.7"}, trusted))
	fmt.Println(handshake.IPKey(netip.MustParseAddr("2001:db8:1:2:3:4:5:6")))
	// Output:
	// 203.0.113.7
	// 192.0.2.44
	// 2001:db8:1:2::/64
}
