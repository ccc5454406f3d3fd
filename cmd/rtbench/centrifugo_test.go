package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/protocol"
)

// The frames below are what Centrifugo v6.9.1 sends and accepts with its
// JSON protocol over /connection/websocket (recorded from
// bench/centrifugo/config.yaml's server).

func TestCfRequestIsACommand(t *testing.T) {
	for _, tc := range []struct {
		id     uint64
		method string
		params string
		want   string
	}{
		{0, protocol.MethodSubscribe, `{"topic":"rtbench.fan.1.0"}`, `{"id":1,"subscribe":{"channel":"rtbench:rtbench.fan.1.0"}}`},
		{41, protocol.MethodPublish, `{"topic":"a\"b","data":{"rtbts":5,"pad":"xx"}}`, `{"id":42,"publish":{"channel":"rtbench:a\"b","data":{"rtbts":5,"pad":"xx"}}}`},
	} {
		got := cfRequest(tc.id, tc.method, []byte(tc.params))
		if string(got) != tc.want {
			t.Errorf("cfRequest(%d, %s, %s) = %s, want %s", tc.id, tc.method, tc.params, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("cfRequest renders invalid JSON: %s", got)
		}
	}
}

func TestCfFrames(t *testing.T) {
	type want struct {
		id   uint64
		code int // 0: no error
	}
	for _, tc := range []struct {
		in   string
		want []want
	}{
		{`{"id":2,"subscribe":{}}`, []want{{id: 1}}},
		{`{"id":5,"publish":{}}` + "\n" + `{"id":6,"publish":{}}`, []want{{id: 4}, {id: 5}}},
		{`{"id":3,"error":{"code":103,"message":"permission denied"}}`, []want{{id: 2, code: 103}}},
		{`{"push":{"channel":"rtbench:a","pub":{"data":{"rtbts":5}}}}`, nil},
		{`{}`, nil},
		{"{}\n" + `{"id":9,"publish":{}}` + "\n", []want{{id: 8}}},
		{`{"push":{"channel":"rtbench:a","pub":{"data":{}}}}` + "\n" + `{"id":1,"publish":{}}`, []want{{id: 0}}},
	} {
		fs, err := cfFrames([]byte(tc.in))
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if len(fs) != len(tc.want) {
			t.Fatalf("%q: %d frames, want %d", tc.in, len(fs), len(tc.want))
		}
		for i, w := range tc.want {
			f := fs[i]
			if f.ID == nil || *f.ID != w.id {
				t.Errorf("%q: frame %d has id %v, want %d", tc.in, i, f.ID, w.id)
			}
			if code := 0; f.Error != nil {
				code = f.Error.Code
				if code != w.code {
					t.Errorf("%q: frame %d error %d, want %d", tc.in, i, code, w.code)
				}
			} else if w.code != 0 {
				t.Errorf("%q: frame %d has no error, want %d", tc.in, i, w.code)
			}
		}
	}
	if _, err := cfFrames([]byte(`{"id":2,"publ`)); err == nil {
		t.Error("a truncated reply decoded")
	}
}

func TestCfHasPing(t *testing.T) {
	push := `{"push":{"channel":"rtbench:a","pub":{"data":{"s":"{}"}}}}`
	for in, want := range map[string]bool{
		`{}`:                    true,
		"{}\n" + push:           true,
		push + "\n{}":           true,
		push + "\n{}\n" + push:  true,
		push:                    false,
		`{"id":1,"publish":{}}`: false,
	} {
		if got := cfHasPing([]byte(in)); got != want {
			t.Errorf("cfHasPing(%q) = %v, want %v", in, got, want)
		}
	}
}

// fakeCentrifugo answers the commands rtbench sends as Centrifugo does,
// pings with every connect reply and every push (batched into the same
// message, one a line) and counts the pongs.
type fakeCentrifugo struct {
	mu    sync.Mutex
	subs  map[string][]*websocket.Conn
	pongs atomic.Int64
	pings atomic.Int64
}

func (f *fakeCentrifugo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := context.Background()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var out [][]byte
		cfLines(b, func(line []byte) error {
			if bytes.Equal(line, cfPingLine) {
				f.pongs.Add(1)
				return nil
			}
			var cmd struct {
				ID        uint64           `json:"id"`
				Connect   *json.RawMessage `json:"connect"`
				Subscribe *struct {
					Channel string `json:"channel"`
				} `json:"subscribe"`
				Publish *struct {
					Channel string          `json:"channel"`
					Data    json.RawMessage `json:"data"`
				} `json:"publish"`
			}
			if err := json.Unmarshal(line, &cmd); err != nil || cmd.ID == 0 {
				c.Close(3501, "bad request")
				return err
			}
			id := strconv.FormatUint(cmd.ID, 10)
			switch {
			case cmd.Connect != nil:
				f.pings.Add(1)
				out = append(out, []byte(`{"id":`+id+`,"connect":{"client":"c","version":"6.9.1","ping":25,"pong":true}}`), cfPingLine)
			case cmd.Subscribe != nil && strings.HasPrefix(cmd.Subscribe.Channel, cfNamespace):
				f.mu.Lock()
				f.subs[cmd.Subscribe.Channel] = append(f.subs[cmd.Subscribe.Channel], c)
				f.mu.Unlock()
				out = append(out, []byte(`{"id":`+id+`,"subscribe":{}}`))
			case cmd.Publish != nil && strings.HasPrefix(cmd.Publish.Channel, cfNamespace):
				ch, _ := json.Marshal(cmd.Publish.Channel)
				push := []byte(`{"push":{"channel":` + string(ch) + `,"pub":{"data":` + string(cmd.Publish.Data) + `}}}` + "\n{}")
				f.mu.Lock()
				subs := f.subs[cmd.Publish.Channel]
				f.mu.Unlock()
				for _, s := range subs {
					f.pings.Add(1)
					s.Write(ctx, websocket.MessageText, push)
				}
				out = append(out, []byte(`{"id":`+id+`,"publish":{}}`))
			default:
				out = append(out, []byte(`{"id":`+id+`,"error":{"code":102,"message":"unknown channel"}}`))
			}
			return nil
		})
		if len(out) > 0 {
			if err := c.Write(ctx, websocket.MessageText, bytes.Join(out, []byte{'\n'})); err != nil {
				return
			}
		}
	}
}

// setCentrifugoMode turns --centrifugo on for a test that does not run in
// parallel with the others (the mode is the package's).
func setCentrifugoMode(t *testing.T) {
	centrifugoMode.Store(true)
	t.Cleanup(func() { centrifugoMode.Store(false) })
}

func TestFanoutAgainstFakeCentrifugo(t *testing.T) {
	setCentrifugoMode(t)
	fake := &fakeCentrifugo{subs: map[string][]*websocket.Conn{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	u, err := checkURL("ws" + strings.TrimPrefix(srv.URL, "http") + "/connection/websocket")
	if err != nil {
		t.Fatal(err)
	}
	res, err := runFanout(testCtx(t), fanoutConfig{URL: u, P: 2, S: 6, T: 2, Size: 64, Duration: 200 * time.Millisecond, Rate: 200, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published == 0 || res.PublishErrors != nil || res.SubsClosed != nil {
		t.Fatalf("published %d errors %v closed %v", res.Published, res.PublishErrors, res.SubsClosed)
	}
	// 6 subscribers over 2 topics: each message reaches 3.
	if res.Expected != 3*res.Published || res.Delivered != res.Expected {
		t.Errorf("published %d expected %d delivered %d, want 3 deliveries each", res.Published, res.Expected, res.Delivered)
	}
	if res.Latency.N != uint64(res.Delivered) {
		t.Errorf("%d latency samples for %d deliveries", res.Latency.N, res.Delivered)
	}
	// Every ping was answered: those with the 8 connect replies and those
	// batched with the pushes (until the connection closed, no later).
	testkit.Eventually(t, 5*time.Second, func() string {
		return "pongs " + strconv.FormatInt(fake.pongs.Load(), 10) + " of " + strconv.FormatInt(fake.pings.Load(), 10) + " pings"
	}, func() bool { return fake.pongs.Load() == fake.pings.Load() })
}

func TestCfOpenRefused(t *testing.T) {
	setCentrifugoMode(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
		c.Write(r.Context(), websocket.MessageText, []byte(`{"id":1,"error":{"code":101,"message":"unauthorized"}}`))
		c.Read(r.Context())
	}))
	t.Cleanup(srv.Close)
	u, err := checkURL("ws" + strings.TrimPrefix(srv.URL, "http") + "/connection/websocket")
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := newDialer(u, nil).dial(testCtx(t))
	if err == nil {
		c.CloseNow()
		t.Fatal("a refused connect dialled")
	}
	if !strings.Contains(err.Error(), "101 unauthorized") {
		t.Fatalf("error %q does not name the refusal", err)
	}
}

// TestFanoutAgainstCentrifugo runs the fan-out against a real Centrifugo
// when RTBENCH_CENTRIFUGO names its binary (bench/centrifugo/compare.sh
// installs one); without it the test is skipped, and the tests above
// cover the protocol code.
func TestFanoutAgainstCentrifugo(t *testing.T) {
	bin := os.Getenv("RTBENCH_CENTRIFUGO")
	if bin == "" {
		t.Skip("RTBENCH_CENTRIFUGO is not set to a centrifugo v6 binary (bench/centrifugo/compare.sh installs one)")
	}
	setCentrifugoMode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close() // centrifugo takes the port
	cmd := exec.Command(bin, "--config", "../../bench/centrifugo/config.yaml")
	cmd.Env = append(os.Environ(), "CENTRIFUGO_HTTP_SERVER_PORT="+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	u, err := checkURL("ws://127.0.0.1:" + port + "/connection/websocket")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "centrifugo listening on "+port, func() bool {
		c, _, err := newDialer(u, nil).dial(testCtx(t))
		if err == nil {
			c.CloseNow()
		}
		return err == nil
	})
	res, err := runFanout(testCtx(t), fanoutConfig{URL: u, P: 2, S: 6, T: 2, Size: 64, Duration: 200 * time.Millisecond, Rate: 200, ServerPID: cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published == 0 || res.PublishErrors != nil || res.SubsClosed != nil || res.Delivered != 3*res.Published {
		t.Fatalf("published %d errors %v closed %v delivered %d", res.Published, res.PublishErrors, res.SubsClosed, res.Delivered)
	}
}
