package sse

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rtserver/rtserver/internal/testkit"
)

// What an idle stream holds of its own, beside its server connection and
// its client's socket, is its pipe and its entry in the session map; the
// parts only one kind of pipe uses hang off pointers the others leave
// nil. The pipe stays in the 128-byte size class (docs/transports.md,
// "What an idle stream costs"): a field that every stream would pay for
// is a decision, not a drift.
func TestAnIdleStreamHoldsOnlyWhatItUses(t *testing.T) {
	if n := unsafe.Sizeof(pipe{}); n > 128 {
		t.Errorf("a pipe is %d bytes, want at most 128", n)
	}
	if p := newPipe(nil, modeRPC); p.ev != nil || p.call != nil {
		t.Error("an rpc stream's pipe holds an event stream's or a POST's state")
	}
	// Reading an event stream's query makes nothing but its topics, and
	// a stream of one topic is not deduplicated through a map.
	if n := testing.AllocsPerRun(100, func() { readStreamQuery("rpc&token=x&name=y") }); n != 0 {
		t.Errorf("reading ?rpc: %v allocations, want 0", n)
	}
	topics := []string{"room:1"}
	if n := testing.AllocsPerRun(100, func() { dedupe(topics) }); n != 0 {
		t.Errorf("dedupe of one topic: %v allocations, want 0", n)
	}
	// The server's upgrade request is the client's request, copied once
	// (its context): its header is not cloned.
	r := httptest.NewRequest(http.MethodGet, "/sse?rpc", nil)
	r.Header.Set("Accept", "text/event-stream")
	r.Header.Set("User-Agent", "a browser")
	if n := testing.AllocsPerRun(100, func() { upgradeRequest(r) }); n != 1 {
		t.Errorf("an upgrade request: %v allocations, want 1", n)
	}
}

type valueKey struct{}

// The server's upgrade request for a stream carries what the server
// reads (the client's address, Host, query, context values, and its
// Origin, Authorization and X-Forwarded-For headers, as sent) and none of
// the client's other headers; the client's own request is left as it
// was.
func TestTheUpgradeRequestCarriesWhatTheServerReads(t *testing.T) {
	var got *http.Request
	server := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		http.Error(w, "no", http.StatusServiceUnavailable)
	})
	h := testkit.Must(New(Config{}, Deps{WebSocket: server}))
	for _, give := range []struct {
		name   string
		header map[string]string
		want   []string // the header's keys beside the upgrade's own
	}{
		{"none of the server's", map[string]string{"Cookie": "c=1", "User-Agent": "ua", "Accept": "text/event-stream"}, nil},
		{"all three", map[string]string{"Origin": "http://x.test", "Authorization": "Bearer t", "X-Forwarded-For": "192.0.2.7", "Cookie": "c=1", "Sec-WebSocket-Protocol": "rt.msgpack"}, []string{"Authorization", "Origin", "X-Forwarded-For"}},
		{"a token alone", map[string]string{"Authorization": "Bearer t"}, []string{"Authorization"}},
	} {
		t.Run(give.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://host.test/sse?rpc&token=tk&name=n", nil)
			r.RemoteAddr = "198.51.100.3:4000"
			r = r.WithContext(context.WithValue(r.Context(), valueKey{}, "v"))
			for k, v := range give.header {
				r.Header.Set(k, v)
			}
			before := r.Header.Clone()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusServiceUnavailable || got == nil {
				t.Fatalf("the server's refusal did not reach the client: %d", rec.Code)
			}
			if got.Method != http.MethodGet || got.URL.RawQuery != "rpc&token=tk&name=n" || got.Host != "host.test" ||
				got.RemoteAddr != r.RemoteAddr || got.Context().Value(valueKey{}) != "v" || got.Body != http.NoBody {
				t.Fatalf("upgrade request %s %q host %q from %q, value %v", got.Method, got.URL.RawQuery, got.Host, got.RemoteAddr, got.Context().Value(valueKey{}))
			}
			want := append([]string{"Connection", "Sec-Websocket-Key", "Sec-Websocket-Version", "Upgrade"}, give.want...)
			slices.Sort(want)
			if keys := slices.Sorted(maps.Keys(got.Header)); !slices.Equal(keys, want) {
				t.Fatalf("upgrade request's header keys %v, want %v", keys, want)
			}
			for _, k := range give.want {
				if got.Header.Get(k) != give.header[k] {
					t.Fatalf("%s: %q, want the client's %q", k, got.Header.Get(k), give.header[k])
				}
			}
			if r.Method != http.MethodGet || !reflectEqualHeader(r.Header, before) {
				t.Fatalf("the client's request changed: %s %v", r.Method, r.Header)
			}
		})
	}
}

func reflectEqualHeader(a, b http.Header) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]string])
}

// A stream's query is read as url.ParseQuery reads it.
func TestStreamQueryReadsAsParseQuery(t *testing.T) {
	for _, raw := range []string{
		"", "rpc", "topic=a&topic=b&topic=a", "topic=a%2Fb&rpc=&lastEventId=1%3Ae%3Aa",
		"topic=a;b&topic=c", "topic=%zz&topic=d", "%74opic=e", "topic=f+g", "lastEventId=1&lastEventId=2",
		"&&topic=&=x&rpc", "rpc=1&topic", "x=%&topic=h",
	} {
		checkStreamQuery(t, raw)
	}
}

func FuzzStreamQuery(f *testing.F) {
	f.Add("topic=a&topic=b&rpc&lastEventId=1%3Ae%3Aa")
	f.Add("topic=a;b&%74opic=c+d&x=%zz")
	f.Fuzz(checkStreamQuery)
}

func checkStreamQuery(t *testing.T, raw string) {
	q := readStreamQuery(raw)
	want, _ := url.ParseQuery(raw)
	if !slices.Equal(q.topics, want["topic"]) || q.rpc != want.Has("rpc") || q.lastEventID != want.Get("lastEventId") {
		t.Fatalf("%q: topics %q rpc %v last %q; url.ParseQuery: %q %v %q", raw, q.topics, q.rpc, q.lastEventID, want["topic"], want.Has("rpc"), want.Get("lastEventId"))
	}
}

// A session is found by its whole id as its session event spelled it:
// the map's half alone, or the id in other letters, finds nothing.
func TestSessionsAreFoundByTheirWholeID(t *testing.T) {
	h := testkit.Must(New(Config{}, Deps{WebSocket: http.NotFoundHandler()}))
	p := newPipe(h, modeRPC)
	h.register(p)
	hexID := hex.EncodeToString(p.id[:])
	if id, ok := parseSessionID(hexID); !ok || h.lookup(id) != p {
		t.Fatalf("%s: not found", hexID)
	}
	other := p.id
	other[15] ^= 1
	if h.lookup(other) != nil {
		t.Fatal("an id that shares only the map's half found the session")
	}
	for _, bad := range []string{strings.ToUpper(hexID), hexID[1:], hexID + "0", "zz" + hexID[2:], ""} {
		if _, ok := parseSessionID(bad); ok {
			t.Fatalf("%q parsed as a session id", bad)
		}
	}
	p.Close()
	if id, _ := parseSessionID(hexID); h.lookup(id) != nil || h.Sessions() != 0 {
		t.Fatal("a closed session is still found")
	}
}

// A read deadline bounds the server's read of a pipe that has nothing
// queued; none (the zero time) waits for input.
func TestPipeReadDeadline(t *testing.T) {
	p := newPipe(testkit.Must(New(Config{}, Deps{WebSocket: http.NotFoundHandler()})), modeRPC)
	buf := make([]byte, 64)
	p.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := p.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	p.SetReadDeadline(time.Time{})
	p.queue(opText, []byte("x"))
	if n, err := p.Read(buf); err != nil || n != len(appendClientFrame(nil, opText, []byte("x"))) {
		t.Fatalf("read without a deadline: %d, %v", n, err)
	}
	p.SetReadDeadline(time.Now().Add(time.Hour))
	p.Close()
	if _, err := p.Read(buf); err != io.EOF {
		t.Fatalf("read of a closed pipe: %v", err)
	}
}

// A session's subscribe is the frame json.Marshal made of it.
func TestSubscribeFrameAsMarshal(t *testing.T) {
	since := map[string]position{"h": {epoch: `e"\<1>`, offset: 42}, "é": {epoch: "x", offset: 0}}
	for i, topic := range []string{"room:1", "h", `a"b\c`, "<&>", "é", "\u2028", ""} {
		type sincePos struct {
			Offset uint64 `json:"offset"`
			Epoch  string `json:"epoch"`
		}
		type params struct {
			Topic   string    `json:"topic"`
			Recover bool      `json:"recover,omitempty"`
			Since   *sincePos `json:"since,omitempty"`
		}
		ps := params{Topic: topic}
		if pos, ok := since[topic]; ok {
			ps.Recover, ps.Since = true, &sincePos{Offset: pos.offset, Epoch: pos.epoch}
		}
		want, _ := json.Marshal(struct {
			JSONRPC string `json:"jsonrpc"`
			ID      string `json:"id"`
			Method  string `json:"method"`
			Params  params `json:"params"`
		}{"2.0", ownIDPrefix + strconv.Itoa(i), "subscribe", ps})
		if got := subscribeFrame(i, topic, since); !bytes.Equal(got, want) {
			t.Errorf("%q:\n got %s\nwant %s", topic, got, want)
		}
	}
}

// The answer to a session's own subscribe is read without a decode as
// the decode reads it: the same topic, result and error.
func TestOwnResponseAsDecode(t *testing.T) {
	for _, payload := range []string{
		`{"jsonrpc":"2.0","id":"sse:0","result":{}}`,
		`{"jsonrpc":"2.0","id":"sse:2","result":{"epoch":"e","offset":3}}`,
		`{"jsonrpc":"2.0","id":"sse:1","error":{"code":-32003,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":"sse:3","result":{}}`,
		`{"jsonrpc":"2.0","id":"sse:01","result":{}}`,
		`{"jsonrpc":"2.0","id":"sse:1","result":{},"x":{}}`,
		`{"jsonrpc":"2.0","id":"sse:","result":{}}`,
		`{"jsonrpc":"2.0","id":"sse:1","result":1}`,
	} {
		checkOwnResponse(t, []byte(payload))
	}
}

func FuzzOwnResponse(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":"sse:2","result":{"epoch":"e","offset":3}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"sse:1","error":{"code":-32003,"message":"no"}}`))
	f.Fuzz(func(t *testing.T, payload []byte) { checkOwnResponse(t, payload) })
}

func checkOwnResponse(t *testing.T, payload []byte) {
	const n = 3
	i, result, rpcErr, ok := ownResponse(payload, n)
	if !ok {
		return // the decode reads it
	}
	var f struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(payload, &f); err != nil {
		t.Fatalf("%s: read as an answer, but does not decode: %v", payload, err)
	}
	j, own := ownID(f.ID, n)
	if f.Method != "" || !own || i != j || !bytes.Equal(result, f.Result) || !bytes.Equal(rpcErr, f.Error) {
		t.Fatalf("%s: read as %d %s %s, decoded as %d (%v) %s %s", payload, i, result, rpcErr, j, own, f.Result, f.Error)
	}
}
