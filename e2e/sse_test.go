package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct {
	Type, ID, Data string
}

// sseStream is an open GET /sse, read event by event.
type sseStream struct {
	t      testing.TB
	resp   *http.Response
	events chan sseEvent
	retry  string // the last retry field
}

// openSSE opens GET /sse?query with headers (key, value pairs) and fails
// the test unless it answers 200 text/event-stream.
func openSSE(t testing.TB, p *proc, query string, headers ...string) *sseStream {
	t.Helper()
	s, status, body := tryOpenSSE(t, p, query, headers...)
	if s == nil {
		t.Fatalf("GET /sse?%s: %d %s", query, status, body)
	}
	return s
}

// tryOpenSSE is openSSE that returns a refusal's status and body instead
// of failing.
func tryOpenSSE(t testing.TB, p *proc, query string, headers ...string) (*sseStream, int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/sse?"+query), nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET /sse: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	s := &sseStream{t: t, resp: resp, events: make(chan sseEvent, 1024)}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	go s.read()
	return s, resp.StatusCode, ""
}

// read parses the stream (the parts of the SSE format rtserver writes).
func (s *sseStream) read() {
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data != nil {
				ev.Data = strings.Join(data, "\n")
				s.events <- ev
			}
			ev, data = sseEvent{}, nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Type = value
		case "id":
			ev.ID = value
		case "data":
			data = append(data, value)
		case "retry":
			s.retry = value
		}
	}
}

// next returns the next event, failing the test when the stream ends or
// none comes within 10s.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.t.Fatal("the event stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		s.t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

// nextOf skips events until one of type typ.
func (s *sseStream) nextOf(typ string) sseEvent {
	s.t.Helper()
	for {
		if ev := s.next(); ev.Type == typ {
			return ev
		}
	}
}

// ended reports whether the stream ends (within 10s) without another event of typ.
func (s *sseStream) endsAfter(typ string) []sseEvent {
	s.t.Helper()
	var got []sseEvent
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return got
			}
			if ev.Type == typ {
				got = append(got, ev)
			}
		case <-timeout:
			s.t.Fatal("the event stream did not end within 10s")
		}
	}
}

// postRPC posts a JSON-RPC body to /sse (query added) and returns the
// status and body.
func postRPC(t testing.TB, p *proc, query, body string, headers ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.url("/sse"+query), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST /sse: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func publishBody(topic, data string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"` + topic + `","data":` + data + `}}`
}

const sseHistoryConfig = `
topics:
  namespaces:
    - pattern: "room:*"
      subscribe: [any]
      publish: [any]
      history: {size: 100, ttl: 1h}
`

// An event stream carries each message's params; on a history topic each
// event's id names the position, and a stream reopened with that id as
// Last-Event-ID gets what it missed, once and in order, then live ones.
func TestSSEStreamRecoversByLastEventID(t *testing.T) {
	p := start(t, sseHistoryConfig)
	s := openSSE(t, p, "topic=room:a&topic=plain")
	if ev := s.next(); ev.Type != "session" || !strings.Contains(ev.Data, `"session":"`) {
		t.Fatalf("first event %+v", ev)
	}
	sub := s.nextOf("subscribed")
	if !strings.Contains(sub.Data, `"topic":"room:a"`) || !strings.Contains(sub.Data, `"epoch":"`) || sub.ID == "" {
		t.Fatalf("subscribed %+v", sub)
	}
	if ev := s.nextOf("subscribed"); ev.Data != `{"topic":"plain"}` {
		t.Fatalf("plain subscribed %+v", ev)
	}
	for i, d := range []string{"1", "2", `{"k":"v"}`} {
		code, body := postRPC(t, p, "", publishBody("room:a", d))
		if code != 200 || !strings.Contains(body, `"offset":`+string(rune('1'+i))) {
			t.Fatalf("publish %s: %d %s", d, code, body)
		}
	}
	if code, body := postRPC(t, p, "", publishBody("plain", `"x"`)); code != 200 || body != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("plain publish: %d %s", code, body)
	}
	var ids []string
	for i, d := range []string{"1", "2", `{"k":"v"}`} {
		ev := s.next()
		want := `{"topic":"room:a","offset":` + string(rune('1'+i)) + `,"data":` + d + `}`
		if ev.Type != "" || ev.Data != want || !strings.HasPrefix(ev.ID, string(rune('1'+i))+":") {
			t.Fatalf("event %d: %+v, want data %s", i, ev, want)
		}
		ids = append(ids, ev.ID)
	}
	if ev := s.next(); ev.Data != `{"topic":"plain","data":"x"}` || ev.ID != "" {
		t.Fatalf("plain event %+v", ev)
	}

	// Reconnect as EventSource does, from after the first message.
	s2 := openSSE(t, p, "topic=room:a", "Last-Event-ID", ids[0])
	postRPC(t, p, "", publishBody("room:a", "4"))
	rec := s2.nextOf("subscribed")
	if !strings.Contains(rec.Data, `"recovered":true`) {
		t.Fatalf("recovery: %+v", rec)
	}
	for i := 2; i <= 4; i++ {
		ev := s2.next()
		if !strings.HasPrefix(ev.Data, `{"topic":"room:a","offset":`+string(rune('0'+i))+`,`) {
			t.Fatalf("after recovery, event %+v, want offset %d", ev, i)
		}
	}

	// A position of another epoch cannot be recovered, and says so.
	s3 := openSSE(t, p, "topic=room:a", "Last-Event-ID", "1:0000beef:room:a")
	if ev := s3.nextOf("subscribed"); !strings.Contains(ev.Data, `"recovered":false,"reason":"epoch"`) {
		t.Fatalf("another epoch: %+v", ev)
	}
}

// The handshake tier judges an event stream as the upgrade it is: the
// token (query or Bearer) and the per-IP rate, each answered with its
// status; and a POST's calls pass the message tier.
func TestSSEHandshakeTierAndAdmission(t *testing.T) {
	const secret = "sse-secret"
	p := start(t, `
auth: {jwt: {hmacSecret: "`+secret+`"}}
handshake: {perIP: {limit: 4, per: 1h}}
admission:
  classes:
    chat: {rate: {limit: 1, per: 1h, by: user}}
  methods:
    publish: chat
`)
	tok := wstest.HS256(secret, "alice")
	if _, code, _ := tryOpenSSE(t, p, "topic=a"); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	s := openSSE(t, p, "topic=a&token="+tok)
	s.nextOf("subscribed")
	// Each POST is a connection of its own; the message tier sheds
	// alice's second publish.
	if code, body := postRPC(t, p, "", publishBody("a", "1"), "Authorization", "Bearer "+tok); code != 200 || !strings.Contains(body, `"result":{}`) {
		t.Fatalf("first publish: %d %s", code, body)
	}
	if ev := s.next(); ev.Data != `{"topic":"a","data":1}` {
		t.Fatalf("event %+v", ev)
	}
	code, body := postRPC(t, p, "", publishBody("a", "2"), "Authorization", "Bearer "+tok)
	if code != 200 || !strings.Contains(body, `"code":-32002`) || !strings.Contains(body, `"class":"chat"`) {
		t.Fatalf("second publish: %d %s, want -32002", code, body)
	}
	// Four upgrades so far (each POST is one, and the one refused by auth
	// counted too): the per-IP rate refuses the next with 429.
	if _, code, body := tryOpenSSE(t, p, "topic=a&token="+tok); code != http.StatusTooManyRequests || !strings.Contains(body, `"RATE_LIMITED"`) {
		t.Fatalf("past the per-IP rate: %d %s", code, body)
	}
}

func TestSSEConnectionCap(t *testing.T) {
	p := start(t, "handshake: {maxConnections: 1}\n")
	s := openSSE(t, p, "topic=a")
	s.nextOf("subscribed")
	if _, code, body := tryOpenSSE(t, p, "topic=b"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"OVERLOADED"`) {
		t.Fatalf("past maxConnections: %d %s", code, body)
	}
	if code, body := postRPC(t, p, "", publishBody("a", "1")); code != http.StatusServiceUnavailable {
		t.Fatalf("POST past maxConnections: %d %s", code, body)
	}
}

// A session's POSTs run on its connection: a subscribe sent later adds a
// topic to the stream, and the answers come on the stream.
func TestSSESessionPost(t *testing.T) {
	p := start(t, "")
	s := openSSE(t, p, "rpc")
	var sess struct{ Session string }
	if ev := s.next(); ev.Type != "session" || json.Unmarshal([]byte(ev.Data), &sess) != nil || sess.Session == "" {
		t.Fatalf("first event %+v", ev)
	}
	code, _ := postRPC(t, p, "?session="+sess.Session, `{"jsonrpc":"2.0","id":7,"method":"subscribe","params":{"topic":"t"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("session POST %s: %d", sess.Session, code)
	}
	if ev := s.next(); ev.Data != `{"jsonrpc":"2.0","id":7,"result":{}}` {
		t.Fatalf("answer on the stream: %+v", ev)
	}
	postRPC(t, p, "", publishBody("t", "5"))
	if ev := s.next(); ev.Data != `{"jsonrpc":"2.0","method":"message","params":{"topic":"t","data":5}}` {
		t.Fatalf("message on the stream: %+v", ev)
	}
	if code, _ := postRPC(t, p, "?session=0123", `{}`); code != http.StatusNotFound {
		t.Fatalf("unknown session: %d, want 404", code)
	}
}

// A drain tells an event stream when to come back (retry) and closes it
// with 1012, as it does a WebSocket; then new streams are refused.
func TestSSEDrain(t *testing.T) {
	p := start(t, "drain: {duration: 1s}\n")
	s := openSSE(t, p, "topic=a")
	s.nextOf("subscribed")
	p.signal(syscall.SIGTERM)
	sys := s.nextOf("system")
	if !strings.Contains(sys.Data, `"event":"draining"`) {
		t.Fatalf("system %+v", sys)
	}
	closes := s.endsAfter("close")
	if len(closes) != 1 || !strings.Contains(closes[0].Data, `"code":1012`) || !strings.Contains(closes[0].Data, "retry_after_ms=") {
		t.Fatalf("close events %+v", closes)
	}
	if s.retry == "" {
		t.Fatal("no retry field before the close")
	}
}

// A stream whose client has gone ends at once, not at the next keepalive
// that fails to write (an hour here): the server watches the client's
// socket while the stream is idle, and the connection, with its
// subscriptions, presence and slot, is released.
func TestSSEStreamEndsWhenItsClientLeaves(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "limits: {pingInterval: 1h}\n")
	s := openSSE(t, p, "topic=a")
	s.nextOf("subscribed")
	p.waitMetric("connections_open", 10*time.Second, func(v float64) bool { return v == 1 })
	// Closing the body of a response not read to its end closes the
	// client's TCP connection.
	s.resp.Body.Close()
	p.waitMetric("connections_open", 10*time.Second, func(v float64) bool { return v == 0 })
}
