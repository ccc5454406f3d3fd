package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// startServer runs s behind a real TCP listener and returns its ws:// URL.
func startServer(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.Close()
	})
	return s, "ws" + strings.TrimPrefix(hs.URL, "http")
}

// client is a raw WebSocket test client.
type client struct {
	t  *testing.T
	ws *websocket.Conn
}

func dial(t *testing.T, url string, subprotocols ...string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: subprotocols})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(1 << 24)
	c := &client{t: t, ws: ws}
	t.Cleanup(func() { ws.CloseNow() })
	return c
}

func (c *client) send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// recv reads one frame; it fails the test on error.
func (c *client) recv() []byte {
	c.t.Helper()
	b, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return b
}

func (c *client) read() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	return b, err
}

// msg is a decoded server frame (response or notification).
type msg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Params struct {
		Topic            string          `json:"topic"`
		Data             json.RawMessage `json:"data"`
		Event            string          `json:"event"`
		ReconnectAfterMs int64           `json:"reconnectAfterMs"`
	} `json:"params"`
	Error *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (c *client) recvMsg() msg {
	c.t.Helper()
	var m msg
	b := c.recv()
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("decode %s: %v", b, err)
	}
	return m
}

// call sends a request with id 1 and returns the response.
func (c *client) call(method, params string) msg {
	c.t.Helper()
	c.send(`{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":` + params + `}`)
	return c.recvMsg()
}

// mustOK fails unless m is a success response.
func mustOK(t *testing.T, m msg) {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("unexpected error %d %s", m.Error.Code, m.Error.Message)
	}
}

// closeStatus reads until the connection ends and returns the close status
// and reason.
func (c *client) closeStatus() (websocket.StatusCode, string) {
	c.t.Helper()
	for {
		_, err := c.read()
		if err != nil {
			var ce websocket.CloseError
			if ok := asCloseError(err, &ce); ok {
				return ce.Code, ce.Reason
			}
			return -1, err.Error()
		}
	}
}
