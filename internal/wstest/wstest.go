// Package wstest is a raw WebSocket client for tests of rtserver: real
// frames over TCP, decoded just enough to assert on, with the test failed
// on any unexpected error. The server package's tests and the black-box
// e2e tests both use it.
package wstest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/protocol"
)

// Conn is one raw client connection. T may be swapped for a subtest's.
type Conn struct {
	T  testing.TB
	WS *websocket.Conn
	// Binary: the server chose protocol.BinarySubprotocol. Send and Read
	// still speak JSON: they transcode to and from its binary frames.
	Binary bool
}

// Dial connects to url offering subprotocols, and closes the connection
// when the test ends.
func Dial(t testing.TB, url string, subprotocols ...string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: subprotocols})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	ws.SetReadLimit(1 << 24)
	t.Cleanup(func() { ws.CloseNow() })
	return &Conn{T: t, WS: ws, Binary: ws.Subprotocol() == protocol.BinarySubprotocol}
}

// DialBinary is Dial offering only the binary protocol, which the
// server must choose.
func DialBinary(t testing.TB, url string) *Conn {
	t.Helper()
	c := Dial(t, url, protocol.BinarySubprotocol)
	if !c.Binary {
		t.Fatalf("the server did not choose %s", protocol.BinarySubprotocol)
	}
	return c
}

// DialSmallReceive is Dial with the client socket's receive buffer
// (SO_RCVBUF) set to about rcvbuf bytes before the upgrade: a client that
// stops reading then holds little, and the server's socket fills soon.
func DialSmallReceive(t testing.TB, url string, rcvbuf int) *Conn {
	t.Helper()
	dialer := &net.Dialer{}
	transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			if err := tc.SetReadBuffer(rcvbuf); err != nil {
				nc.Close()
				return nil, err
			}
		}
		return nc, nil
	}}
	t.Cleanup(transport.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	ws.SetReadLimit(1 << 24)
	t.Cleanup(func() { ws.CloseNow() })
	return &Conn{T: t, WS: ws}
}

// Send writes one text frame.
func (c *Conn) Send(frame string) {
	c.T.Helper()
	if !c.TrySend(frame) {
		c.T.Fatalf("write failed")
	}
}

// TrySend writes a frame and reports whether it went out: for background
// publishers whose server may go away on purpose.
func (c *Conn) TrySend(frame string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.Binary {
		b, ok := protocol.JSONToBinary(nil, []byte(frame))
		if !ok {
			return false
		}
		return c.WS.Write(ctx, websocket.MessageBinary, b) == nil
	}
	return c.WS.Write(ctx, websocket.MessageText, []byte(frame)) == nil
}

// Read reads one frame; on a binary connection, a binary frame as the
// JSON it transcodes to.
func (c *Conn) Read() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	typ, b, err := c.WS.Read(ctx)
	if err != nil || !c.Binary {
		return b, err
	}
	if typ != websocket.MessageBinary {
		return nil, errors.New("a text frame on a binary connection: " + string(b))
	}
	js, perr := protocol.BinaryToJSON(nil, b, 0)
	if perr != nil {
		return nil, perr
	}
	return js, nil
}

// RecvRaw reads one frame and fails the test on error.
func (c *Conn) RecvRaw() []byte {
	c.T.Helper()
	b, err := c.Read()
	if err != nil {
		c.T.Fatalf("read: %v", err)
	}
	return b
}

// Frame is a decoded server frame: a response or a notification.
type Frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Params struct {
		Topic            string          `json:"topic"`
		Offset           uint64          `json:"offset"` // a history topic's message
		Data             json.RawMessage `json:"data"`
		Event            string          `json:"event"`
		ReconnectAfterMs int64           `json:"reconnectAfterMs"`
		ExpiresInMs      int64           `json:"expiresInMs"`
	} `json:"params"`
	Error *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// Recv reads and decodes one frame.
func (c *Conn) Recv() Frame {
	c.T.Helper()
	b := c.RecvRaw()
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		c.T.Fatalf("decode %s: %v", b, err)
	}
	return f
}

var nextID atomic.Int64

// Call sends a request with a fresh id and returns its response, skipping
// notifications and other responses.
func (c *Conn) Call(method, params string) Frame {
	c.T.Helper()
	id := strconv.FormatInt(nextID.Add(1), 10)
	c.Send(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`)
	for {
		if f := c.Recv(); string(f.ID) == id {
			return f
		}
	}
}

// ExpectMessage reads until a message notification for topic arrives and
// returns its data.
func (c *Conn) ExpectMessage(topic string) string {
	c.T.Helper()
	for {
		if f := c.Recv(); f.Method == "message" && f.Params.Topic == topic {
			return string(f.Params.Data)
		}
	}
}

// MustOK fails unless f is a success response.
func MustOK(t testing.TB, f Frame) {
	t.Helper()
	if f.Error != nil {
		t.Fatalf("error %d %s %s", f.Error.Code, f.Error.Message, f.Error.Data)
	}
}

// CloseStatus reads until the connection ends and returns the close code
// and reason (-1 and the error text when it ended without a close frame).
func (c *Conn) CloseStatus() (websocket.StatusCode, string) {
	for {
		if _, err := c.Read(); err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			return -1, err.Error()
		}
	}
}

// RetryHint reads the retry hint of a close reason (1012, 1013) and fails
// unless the reason is exactly the hint, with N > 0.
func RetryHint(t testing.TB, reason string) int {
	t.Helper()
	ms := retryhint.FromReason(reason).Milliseconds()
	if ms <= 0 || reason != retryhint.Reason(ms) {
		t.Fatalf("close reason %q is not exactly a retry hint with N > 0", reason)
	}
	return int(ms)
}

// StalledAndHealthy publishes n messages (each about size bytes of data)
// to topic from pub, while healthy reads every one and stalled reads
// nothing. Publishing goes in windows that healthy catches up with: healthy
// means "reads as fast as it is sent", which keeps the run about stalled.
// It fails the test unless healthy receives all n in order. cutOff reports
// when the server has cut stalled off; from then on stalled reads again,
// to its end. It returns stalled's close code and reason. pub is never
// read afterwards: it is read in the background here (CloseRead), so that
// it answers the server's pings however long the run takes (a client that
// never reads never answers one, and is dropped as dead).
func StalledAndHealthy(t testing.TB, pub, healthy, stalled *Conn, topic string, n, size int, cutOff func() bool) (websocket.StatusCode, string) {
	t.Helper()
	pub.WS.CloseRead(context.Background())
	payload := strings.Repeat("p", size)
	var got atomic.Int64
	healthyDone := make(chan error, 1)
	go func() {
		for i := range n {
			b, err := healthy.Read()
			if err != nil {
				healthyDone <- errors.New("healthy read " + strconv.Itoa(i) + ": " + err.Error())
				return
			}
			var f Frame
			var d struct{ I int }
			if json.Unmarshal(b, &f) != nil || json.Unmarshal(f.Params.Data, &d) != nil || d.I != i {
				healthyDone <- errors.New("healthy: message " + strconv.Itoa(i) + " missing or out of order")
				return
			}
			got.Add(1)
		}
		healthyDone <- nil
	}()
	type closed struct {
		code   websocket.StatusCode
		reason string
	}
	stalledDone := make(chan closed, 1)
	resumed := false
	resume := func() {
		if resumed || !cutOff() {
			return
		}
		resumed = true
		go func() {
			code, reason := stalled.CloseStatus()
			stalledDone <- closed{code, reason}
		}()
	}
	const window = 100
	var healthyErr error
	finished := false
	for i := 0; i < n; i += window {
		for j := i; j < min(i+window, n); j++ {
			pub.Send(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"` + topic + `","data":{"i":` + strconv.Itoa(j) + `,"p":"` + payload + `"}}}`)
		}
		for !finished && got.Load() < int64(min(i+window, n)) {
			select {
			case healthyErr = <-healthyDone:
				finished = true
			case <-time.After(time.Millisecond):
			}
		}
		if healthyErr != nil {
			t.Fatalf("healthy subscriber: %v", healthyErr)
		}
		resume()
	}
	if !finished {
		healthyErr = <-healthyDone
	}
	if healthyErr != nil || got.Load() != int64(n) {
		t.Fatalf("healthy subscriber got %d of %d: %v", got.Load(), n, healthyErr)
	}
	resume()
	if !resumed {
		t.Fatal("the stalled subscriber was never cut off")
	}
	st := <-stalledDone
	return st.code, st.reason
}
