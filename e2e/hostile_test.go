package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// Holes found by an adversarial test of the built binary. Each
// test here failed on the build it attacked.

// A publish whose data holds invalid UTF-8 (FF FE inside a JSON string)
// passes json.Valid; relayed, it makes every browser subscriber fail its
// connection. The publisher is closed with 1007 instead, and an envelope
// carrying such data through Redis is dropped and counted: subscribers,
// local and remote, only ever see the valid messages.
func TestInvalidUTF8IsNeverRelayed(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	a, b := start(t, fleetConfig(r.URL(), "")), start(t, fleetConfig(r.URL(), ""))
	local, remote := wstest.Dial(t, a.WS()), wstest.Dial(t, b.WS())
	wstest.MustOK(t, local.Call("subscribe", `{"topic":"t"}`))
	wstest.MustOK(t, remote.Call("subscribe", `{"topic":"t"}`))

	bad := wstest.Dial(t, a.WS())
	bad.Send(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":"` + "\xff\xfe" + `"}}`)
	if code, _ := bad.CloseStatus(); code != websocket.StatusInvalidFramePayloadData {
		t.Fatalf("invalid UTF-8 frame: close %d, want 1007", code)
	}
	a.waitMetric(`protocol_errors_total{code="1007"}`, 10*time.Second, func(v float64) bool { return v == 1 })

	// The same bytes injected straight into the bus channel, as a sibling
	// (or anyone who can publish to Redis) could.
	if _, err := r.Do("PUBLISH", "rt:bus", busEnvelope("\"\xff\xfe\"")); err != nil {
		t.Fatal(err)
	}
	b.waitMetric(`bus_messages_dropped_total{reason="malformed"}`, 10*time.Second, func(v float64) bool { return v == 1 })

	wstest.MustOK(t, wstest.Dial(t, a.WS()).Call("publish", `{"topic":"t","data":"ok"}`))
	for name, c := range map[string]*wstest.Conn{"local": local, "remote": remote} {
		if got := c.ExpectMessage("t"); got != `"ok"` {
			t.Fatalf("%s subscriber got %q first, want the valid message", name, got)
		}
	}
}

// busEnvelope is an unsigned bus message from an instance named "other"
// on topic t, carrying data as is: what anyone who can PUBLISH to Redis
// can inject.
func busEnvelope(data string) string {
	return "\x01\x05other\x01t" + data
}

// exactBackend is an RPC backend that reads keys exactly and keeps the
// last of a repeated one, as JavaScript's JSON.parse does; it answers with
// the method it ran. (The Go-style reading, case-insensitive keys, is
// covered by rpcproxy's FuzzForwardedIsAdmitted.)
func exactBackend(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dec := json.NewDecoder(r.Body)
		members := map[string]json.RawMessage{}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			http.Error(w, "not an object", http.StatusBadRequest)
			return
		}
		for dec.More() {
			tok, err := dec.Token()
			var v json.RawMessage
			if err != nil || dec.Decode(&v) != nil {
				http.Error(w, "bad object", http.StatusBadRequest)
				return
			}
			members[tok.(string)] = v
		}
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(members["id"]) + `,"result":{"method":` + string(members["method"]) + `}}`))
	}))
	t.Cleanup(s.Close)
	return s
}

// A key that differs only in case must not split what is admitted from
// what runs: {"method":"admin.wipe","Method":"harmless"} is admin.wipe to
// the admission check and to the backend, and
// {"method":"harmless","Method":"admin.wipe"} is harmless to both. A
// repeated member is -32600.
func TestCaseVariantKeysCannotBypassAdmission(t *testing.T) {
	leakcheck.Check(t)
	be := exactBackend(t)
	p := start(t, fmt.Sprintf(`
rpc: {proxy: {url: %q}}
admission:
  classes: {admin: {rate: {limit: 1, per: 1h, by: conn}}}
  methods: {"admin.*": admin}
`, be.URL))
	c := wstest.Dial(t, p.WS())
	ran := func(frame string) (string, *int) {
		t.Helper()
		c.Send(frame)
		f := c.Recv()
		if f.Error != nil {
			return "", &f.Error.Code
		}
		var res struct{ Method string }
		if err := json.Unmarshal(f.Result, &res); err != nil {
			t.Fatalf("result %s: %v", f.Result, err)
		}
		return res.Method, nil
	}

	if m, code := ran(`{"jsonrpc":"2.0","id":1,"method":"admin.wipe","Method":"harmless"}`); code != nil || m != "admin.wipe" {
		t.Fatalf("first admin.wipe: backend ran %q, error %v", m, code)
	}
	// The admin class allows one call per hour on this connection.
	if m, code := ran(`{"jsonrpc":"2.0","id":2,"method":"admin.wipe","Method":"harmless"}`); code == nil || *code != protocol.CodeRateLimited {
		t.Fatalf("second admin.wipe was not rate limited: the backend ran %q", m)
	}
	if m, code := ran(`{"jsonrpc":"2.0","id":3,"method":"harmless","Method":"admin.wipe","METHOD":"admin.wipe"}`); code != nil || m != "harmless" {
		t.Fatalf("admitted harmless, backend ran %q (error %v)", m, code)
	}
	if _, code := ran(`{"jsonrpc":"2.0","id":4,"method":"harmless","method":"admin.wipe"}`); code == nil || *code != protocol.CodeInvalidRequest {
		t.Fatalf("repeated method: error %v, want -32600", code)
	}

	// Built-in params decode exactly too.
	sub := wstest.Dial(t, p.WS())
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"ok"}`))
	wstest.MustOK(t, c.Call("publish", `{"topic":"ok","Topic":"__x","data":1}`))
	if got := sub.ExpectMessage("ok"); got != "1" {
		t.Fatalf("got %s on ok", got)
	}
	if f := c.Call("publish", `{"topic":"ok","topic":"other","data":1}`); f.Error == nil || f.Error.Code != protocol.CodeInvalidRequest {
		t.Fatalf("repeated topic: %+v, want -32600", f)
	}
}

// closedByServer sends head on a fresh TCP connection to addr, reads the
// response, then sends tail (maybe nothing) and stays silent: it reports
// whether the server closed the connection within 20 seconds (far above
// the timeouts the test configures).
func closedByServer(t *testing.T, addr, head, tail string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first response: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if tail != "" {
		if _, err := c.Write([]byte(tail)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = br.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err != io.EOF {
		t.Fatalf("read after the first response: %v", err)
	}
	return true
}

// A client that sends one request and then stays silent, or sends the
// first bytes of another and stops, is closed after http.idleTimeout, on
// the main and the admin listener. A WebSocket open for longer than every
// HTTP timeout is not affected: the upgrade cleared its deadlines.
func TestIdleHTTPConnectionsAreClosed(t *testing.T) {
	leakcheck.Check(t)
	admin := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := start(t, fmt.Sprintf(`
adminListen: %q
http: {readHeaderTimeout: 300ms, readTimeout: 300ms, idleTimeout: 300ms}
`, admin))
	ws := wstest.Dial(t, p.WS())
	const get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct{ name, addr, head, tail string }{
		{"silent after one request", p.Addr, get, ""},
		{"three bytes of a second request", p.Addr, get, "GET"},
		{"admin listener", admin, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "G"},
	} {
		if !closedByServer(t, tc.addr, tc.head, tc.tail) {
			t.Errorf("%s: the connection was still open after 20s", tc.name)
		}
	}
	wstest.MustOK(t, ws.Call("subscribe", `{"topic":"t"}`))
}

// A signed cluster-rate envelope captured off Redis is not accepted again
// once its sender has been forgotten: the attacker needs no secret, only
// the right to publish to Redis, and used to keep a topic shed for as
// long as the replays went on.
func TestReplayedRateEnvelopeIsDropped(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := signedFleetConfig(r.URL(), `admission:
  classes: {broadcast: {clusterTopPublisher: {threshold: 20, by: topic}}}
  methods: {publish: broadcast}
`)
	a, b := start(t, cfg), start(t, cfg)

	// Capture one of B's signed envelopes with "hot" in its slice.
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	ps := rc.Subscribe(context.Background(), "rt:pressure:rates")
	defer ps.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	paced(t, b, "hot", 50, stop, &wg)
	var captured string
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for captured == "" {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("no envelope of B with hot: %v", err)
		}
		var e struct {
			Slice []struct {
				Topic          string
				MessagesPerSec float64
			}
		}
		if json.Unmarshal([]byte(msg.Payload), &e) == nil {
			for _, s := range e.Slice {
				if s.Topic == "hot" && s.MessagesPerSec >= 20 {
					captured = msg.Payload
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	// A has heard of B (and so of an envelope at least as new as the
	// captured one) before B dies.
	a.waitMetric("cluster_publish_rate_instances", 10*time.Second, func(v float64) bool { return v == 1 })
	b.cmd.Process.Signal(syscall.SIGKILL)
	a.waitMetric("cluster_publish_rate_instances", 10*time.Second, func(v float64) bool { return v == 0 })

	before := a.metric("cluster_publish_rate_parse_errors_total")
	for range 3 {
		if _, err := r.Do("PUBLISH", "rt:pressure:rates", captured); err != nil {
			t.Fatal(err)
		}
	}
	// A marker after the replays: once it is counted, they were handled.
	if _, err := r.Do("PUBLISH", "rt:pressure:rates", "marker"); err != nil {
		t.Fatal(err)
	}
	a.waitMetric("cluster_publish_rate_parse_errors_total", 10*time.Second, func(v float64) bool { return v == before+1 })
	if v := a.metric("cluster_publish_rate_instances"); v != 0 {
		t.Fatalf("the replayed envelope brought B back: cluster_publish_rate_instances = %v", v)
	}
	wstest.MustOK(t, wstest.Dial(t, a.WS()).Call("publish", `{"topic":"hot","data":1}`))
}

// A second signal stops at once even when clients never answer the close
// handshake: it used to wait out the WebSocket library's 5s close timeout
// for each connection already closing.
func TestSecondSignalDoesNotWaitForSilentClients(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "drain: {duration: 1h}\n")
	for range 3 {
		// These clients never read again, so never answer a close frame.
		wstest.MustOK(t, wstest.Dial(t, p.WS()).Call("subscribe", `{"topic":"t"}`))
	}
	p.signal(syscall.SIGTERM)
	testkit.Eventually(t, 5*time.Second, "readyz 503", func() bool { return p.status("/readyz") == http.StatusServiceUnavailable })
	p.signal(syscall.SIGTERM)
	// Far below the 5s close-handshake wait the bug spent, far above the
	// milliseconds a stop takes.
	if code := p.exitCode(3 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}

// During a Redis outage go-redis's own lines go through the structured,
// rate-limited log: no bare "redis: ..." lines, at most one "redis client"
// warning per 10s (with a count of those suppressed).
func TestRedisClientLogsAreStructuredAndLimited(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	p := start(t, fleetConfig(r.URL(), "log: {format: json}\n"))
	r.Stop()
	testkit.Eventually(t, 20*time.Second, "a redis client warning", func() bool {
		return strings.Contains(p.log.String(), `"msg":"redis client"`)
	})
	testkit.Eventually(t, 20*time.Second, "readyz 503", func() bool { return p.status("/readyz") == http.StatusServiceUnavailable })
	n := 0
	for _, line := range strings.Split(p.log.String(), "\n") {
		if line == "" {
			continue
		}
		if !json.Valid([]byte(line)) {
			t.Errorf("unstructured log line: %q", line)
		}
		if strings.Contains(line, `"msg":"redis client"`) {
			n++
		}
	}
	if n > 2 {
		t.Errorf("%d redis client warnings within the first seconds of an outage, want 1 per 10s (limited)", n)
	}
}

// With publishRate.hmacSecret set the bus is signed too: a well-formed
// message injected straight into Redis (anyone who can PUBLISH there
// could inject on any topic) is dropped and counted; real traffic flows.
func TestSignedBusDropsInjectedMessages(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := signedFleetConfig(r.URL(), "")
	a, b := start(t, cfg), start(t, cfg)
	sub := wstest.Dial(t, b.WS())
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"t"}`))

	if _, err := r.Do("PUBLISH", "rt:bus", busEnvelope(`"injected"`)); err != nil {
		t.Fatal(err)
	}
	b.waitMetric(`bus_messages_dropped_total{reason="malformed"}`, 10*time.Second, func(v float64) bool { return v == 1 })
	wstest.MustOK(t, wstest.Dial(t, a.WS()).Call("publish", `{"topic":"t","data":"real"}`))
	if got := sub.ExpectMessage("t"); got != `"real"` {
		t.Fatalf("subscriber got %s first, want the real message", got)
	}
}

// A cost rule that prices a call by one of its params (param:n) must
// charge what the backend will read: params holding n twice, or a key
// that means n to another decoder (N, \u006e), are denied, not charged
// for the first value while the backend runs the last.
func TestAmbiguousCostParamIsDenied(t *testing.T) {
	leakcheck.Check(t)
	be := exactBackend(t)
	p := start(t, fmt.Sprintf(`
rpc: {proxy: {url: %q}}
admission:
  classes: {gen: {cost: {budget: 10, per: 1h, of: "param:n", by: conn}}}
  methods: {gen: gen}
`, be.URL))
	c := wstest.Dial(t, p.WS())
	for _, params := range []string{`{"n":1,"n":1000}`, `{"n":1,"N":1000}`, `{"n":1,"\u006e":1000}`} {
		if f := c.Call("gen", params); f.Error == nil {
			t.Errorf("gen %s was admitted (charged 1, the backend reads 1000)", params)
		}
	}
	wstest.MustOK(t, c.Call("gen", `{"n":3}`))
}
