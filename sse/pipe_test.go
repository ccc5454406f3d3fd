package sse

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/server"
)

// recordConn is a client socket that keeps what is written to it.
type recordConn struct {
	net.Conn // nil: only Write, Close and SetWriteDeadline are called
	mu       sync.Mutex
	buf      bytes.Buffer
}

func (r *recordConn) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(b)
}

func (r *recordConn) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func serverFrame(op byte, payload string) []byte {
	b := []byte{0x80 | op}
	n := len(payload)
	switch {
	case n < 126:
		b = append(b, byte(n))
	case n <= 0xFFFF:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, payload...)
}

// However the server's writes cut its frames (a frame's rest after a
// short write, several frames in one write), the client gets the same
// events: the pipe translates whole frames only, in order.
func TestPipeEventsDoNotDependOnWriteBoundaries(t *testing.T) {
	var stream []byte
	stream = append(stream, serverFrame(opText, `{"jsonrpc":"2.0","id":"sse:0","result":{"epoch":"e1","offset":0}}`)...)
	for i := 1; i <= 20; i++ {
		data := strings.Repeat("x", i*i*i*9) // 9 to 72,000 bytes: every length encoding
		stream = append(stream, serverFrame(opText, `{"jsonrpc":"2.0","method":"message","params":{"topic":"room:a","offset":`+itoa(i)+`,"data":"`+data+`"}}`)...)
		if i%7 == 0 {
			stream = append(stream, serverFrame(opPing, "")...)
		}
	}
	stream = append(stream, serverFrame(opText, `{"jsonrpc":"2.0","method":"system","params":{"event":"draining","reconnectAfterMs":1500}}`)...)
	stream = append(stream, serverFrame(opClose, "\x03\xf4retry_after_ms=1500")...)

	run := func(cuts []int) string {
		rc := &recordConn{}
		p := newPipe(testkit.Must(New(Config{}, Deps{WebSocket: http.NotFoundHandler()})), modeEvents)
		p.nc, p.ev = rc, &events{topics: []string{"room:a"}}
		last := 0
		for _, c := range append(cuts, len(stream)) {
			if _, err := p.Write(stream[last:c]); err != nil {
				t.Fatal(err)
			}
			last = c
		}
		return rc.String()
	}
	want := run(nil)
	for _, part := range []string{"event: subscribed\nid: 0:e1:room:a\n", "id: 20:e1:room:a\n", "retry: 1500\n\nevent: system\n", "event: close\ndata: {\"code\":1012,\"reason\":\"retry_after_ms=1500\"}\n\n"} {
		if !strings.Contains(want, part) {
			t.Fatalf("the events lack %q", part)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		var cuts []int
		for at := 0; ; {
			at += 1 + r.IntN(20000)
			if at >= len(stream) {
				break
			}
			cuts = append(cuts, at)
		}
		if got := run(cuts); got != want {
			t.Fatalf("cut at %v: the events differ", cuts)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// A POST without a session is a connection of the server's own: its
// answer is the response body, and the connection ends after it.
func TestPostRunsOnAConnectionOfItsOwn(t *testing.T) {
	s, err := server.New(server.Config{}, server.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	h := testkit.Must(New(Config{MaxMessageBytes: 200}, Deps{WebSocket: s}))
	ts := httptest.NewServer(h)
	defer ts.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(ts.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"a","data":1}}`); code != 200 || body != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("publish: %d %s", code, body)
	}
	if code, body := post(`[{"jsonrpc":"2.0","id":1,"method":"nope"},{"jsonrpc":"2.0","method":"publish","params":{"topic":"a","data":1}}]`); code != 200 || !strings.HasPrefix(body, `[{"jsonrpc":"2.0","id":1,"error":{"code":-32601`) {
		t.Fatalf("batch: %d %s", code, body)
	}
	if code, _ := post(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"a","data":1}}`); code != http.StatusAccepted {
		t.Fatalf("notification: %d, want 202", code)
	}
	if code, body := post(`{"jsonrpc":`); code != 200 || !strings.Contains(body, `"code":-32700`) {
		t.Fatalf("not JSON: %d %s", code, body)
	}
	if code, _ := post(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"a","data":"` + strings.Repeat("x", 200) + `"}}`); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("too large: %d, want 413", code)
	}
	if n := h.Sessions(); n != 0 {
		t.Fatalf("%d sessions after POSTs without one", n)
	}
}
