package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
)

// rawAnswer is a response read off a raw connection: its head as sent,
// parsed, and its body (a stream's first event, for an event stream).
type rawAnswer struct {
	head []byte
	resp *http.Response
	body []byte
}

// rawGetSSE sends GET /sse?query with headers (key, value pairs) on a
// connection of its own and reads the answer. viaNetHTTP adds
// Content-Length: 0, a head the listener does not serve itself but
// hands on to Go's HTTP server: the same request by the other road.
func rawGetSSE(t *testing.T, p *proc, query string, viaNetHTTP bool, headers ...string) rawAnswer {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET /sse?" + query + " HTTP/1.1\r\nHost: " + p.Addr + "\r\n"
	for i := 0; i+1 < len(headers); i += 2 {
		req += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	if viaNetHTTP {
		req += "Content-Length: 0\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var head []byte
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("GET /sse?%s: head %q: %v", query, head, err)
		}
		head = append(head, line...)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := rawAnswer{head: head, resp: resp}
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		for !bytes.HasSuffix(a.body, []byte("\n\n")) { // the session event
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("first event %q: %v", a.body, err)
			}
			a.body = append(a.body, line...)
		}
		return a
	}
	n, err := strconv.Atoi(resp.Header.Get("Content-Length"))
	if err != nil {
		t.Fatalf("GET /sse?%s: no Content-Length: %q", query, head)
	}
	a.body = make([]byte, n)
	if _, err := io.ReadFull(br, a.body); err != nil {
		t.Fatal(err)
	}
	return a
}

// digits stand for what differs between two answers by design: session
// ids, and retry hints (spread at random) with the lengths they change.
var digits = regexp.MustCompile(`[0-9a-f]{32}|[0-9]+`)

// An event stream's request read by the listener itself gets the answer
// Go's HTTP server would give it: the same stream head, byte for byte,
// and for every refusal the same status, headers and body. The one
// differences: a refusal answered at the listener closes its connection
// (Connection: close), where Go's server would keep it for another
// request, and the listener's shed while a cap is full has no Date.
func TestSSEHeadAtTheDoorAsThroughNetHTTP(t *testing.T) {
	leakcheck.Check(t)
	const secret = "door-secret"
	p := start(t, `
auth: {jwt: {hmacSecret: "`+secret+`"}}
handshake: {allowedOrigins: ["https://app.example"], maxConnections: 2}
`)
	tok := wstest.HS256(secret, "alice")
	type give struct {
		name    string
		query   string
		headers []string
		status  int
	}
	refusals := []give{
		{"no token", "topic=a", nil, http.StatusUnauthorized},
		{"bad token", "topic=a&token=nope", nil, http.StatusUnauthorized},
		{"foreign origin", "topic=a", []string{"Authorization", "Bearer " + tok, "Origin", "https://elsewhere.example"}, http.StatusForbidden},
		{"no topic", "token=" + tok, nil, http.StatusBadRequest},
	}
	compareRefusal := func(t *testing.T, g give) {
		door := rawGetSSE(t, p, g.query, false, g.headers...)
		nh := rawGetSSE(t, p, g.query, true, g.headers...)
		if door.resp.StatusCode != g.status || nh.resp.StatusCode != g.status {
			t.Fatalf("%s: status %d at the door, %d through net/http; want %d", g.name, door.resp.StatusCode, nh.resp.StatusCode, g.status)
		}
		if !door.resp.Close || nh.resp.Close {
			t.Fatalf("%s: close %v at the door, %v through net/http: the door did not serve it\n%s", g.name, door.resp.Close, nh.resp.Close, door.head)
		}
		// The door's own 503 (a shed, before any handler) has no Date,
		// which HTTP makes optional on a 5xx; every other answer has one.
		if nh.resp.Header.Get("Date") == "" || (g.status < 500 && door.resp.Header.Get("Date") == "") {
			t.Fatalf("%s: no Date: %v at the door, %v through net/http", g.name, door.resp.Header, nh.resp.Header)
		}
		door.resp.Header.Del("Date")
		nh.resp.Header.Del("Date")
		dh, nhh := headerText(door.resp.Header), headerText(nh.resp.Header)
		if digits.ReplaceAllString(dh, "") != digits.ReplaceAllString(nhh, "") {
			t.Fatalf("%s: headers at the door\n%s\nthrough net/http\n%s", g.name, dh, nhh)
		}
		if db, nb := digits.ReplaceAll(door.body, nil), digits.ReplaceAll(nh.body, nil); !bytes.Equal(db, nb) {
			t.Fatalf("%s: body at the door %q, through net/http %q", g.name, door.body, nh.body)
		}
	}
	for _, g := range refusals {
		compareRefusal(t, g)
	}

	// Streams: the head the handler writes itself, Access-Control for the
	// admitted origin included, then the session event.
	auth := []string{"Authorization", "Bearer " + tok, "Origin", "https://app.example"}
	door := rawGetSSE(t, p, "topic=a", false, auth...)
	nh := rawGetSSE(t, p, "topic=a", true, auth...)
	if door.resp.StatusCode != 200 || !bytes.Equal(door.head, nh.head) {
		t.Fatalf("stream head at the door\n%s\nthrough net/http\n%s", door.head, nh.head)
	}
	if !bytes.Contains(door.head, []byte("\r\nAccess-Control-Allow-Origin: https://app.example\r\n")) {
		t.Fatalf("stream head %q", door.head)
	}
	if db, nb := digits.ReplaceAll(door.body, nil), digits.ReplaceAll(nh.body, nil); !bytes.Equal(db, nb) || !bytes.HasPrefix(door.body, []byte("event: session\n")) {
		t.Fatalf("first event at the door %q, through net/http %q", door.body, nh.body)
	}

	// Both streams have gone (their connections closed with rawGetSSE);
	// two more fill maxConnections, and the next stream is refused: by the
	// door's own 503 on one road, the handshake tier's on the other.
	p.waitMetric("connections_open", 10*time.Second, func(v float64) bool { return v == 0 })
	s1 := openSSE(t, p, "topic=a", auth...)
	s2 := openSSE(t, p, "topic=a", auth...)
	s1.nextOf("subscribed")
	s2.nextOf("subscribed")
	compareRefusal(t, give{"over maxConnections", "topic=a", auth, http.StatusServiceUnavailable})
}

// headerText is h as sorted lines, for comparing and printing.
func headerText(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}
