package wsock

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// tb is what the helpers need of a *testing.T or *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

const upgradeHead = "GET /ws HTTP/1.1\r\nHost: rt.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

const healthHead = "GET /healthz HTTP/1.1\r\nHost: rt.example.com\r\n\r\n"

func TestClassifyHead(t *testing.T) {
	const big = 1 << 20
	tests := []struct {
		name string
		give string
		want HeadVerdict
	}{
		{"upgrade", upgradeHead, HeadSimple},
		{"query", "GET /ws?token=a.b-c_d%20 HTTP/1.1\r\nHost: h\r\n\r\n", HeadSimple},
		{"http/1.0 without host", "GET /ws HTTP/1.0\r\n\r\n", HeadSimple},
		{"host with port and spaces", "GET /ws HTTP/1.1\r\nhost:  [::1]:80 \r\n\r\n", HeadSimple},
		{"empty prefix", "", HeadMore},
		{"partial line", "GET /w", HeadMore},
		{"partial head", "GET /ws HTTP/1.1\r\nHost: h\r\n", HeadMore},
		{"head split in CRLF", "GET /ws HTTP/1.1\r\nHost: h\r\n\r", HeadMore},
		{"healthz", healthHead, HeadOther},
		{"other path prefix", "GET /wsx HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"subpath", "GET /ws/ HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"post", "POST /ws HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"head method", "HEAD /ws HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"lower-case method", "get /ws HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"absolute form", "GET http://h/ws HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"http/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HeadOther},
		{"tls", "\x16\x03\x01\x02\x00\x01", HeadOther},
		{"missing host 1.1", "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", HeadOther},
		{"two hosts", "GET /ws HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", HeadOther},
		{"bad host", "GET /ws HTTP/1.1\r\nHost: a/b\r\n\r\n", HeadOther},
		{"http/1.2", "GET /ws HTTP/1.2\r\nHost: h\r\n\r\n", HeadOther},
		{"two spaces", "GET /ws  HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"bare LF", "GET /ws HTTP/1.1\nHost: h\n\n", HeadOther},
		{"bare CR in value", "GET /ws HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", HeadOther},
		{"space before colon", "GET /ws HTTP/1.1\r\nHost : h\r\n\r\n", HeadOther},
		{"obs-fold", "GET /ws HTTP/1.1\r\nHost: h\r\n x\r\n\r\n", HeadOther},
		{"no colon", "GET /ws HTTP/1.1\r\nHost: h\r\nfoo\r\n\r\n", HeadOther},
		{"empty name", "GET /ws HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", HeadOther},
		{"content-length", "GET /ws HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", HeadOther},
		{"chunked", "GET /ws HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", HeadOther},
		{"expect", "GET /ws HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n", HeadOther},
		{"pipelined", "GET /ws HTTP/1.1\r\nHost: h\r\n\r\nGET", HeadOther},
		{"control in query", "GET /ws?a\x01 HTTP/1.1\r\nHost: h\r\n\r\n", HeadOther},
		{"NUL in value", "GET /ws HTTP/1.1\r\nHost: h\r\nX: \x00\r\n\r\n", HeadOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := ClassifyHead([]byte(tt.give), "/ws", 0, big); got != tt.want {
				t.Fatalf("ClassifyHead(%q) = %d, want %d", tt.give, got, tt.want)
			}
		})
	}
	full := []byte("GET /ws HTTP/1.1\r\nX: " + strings.Repeat("a", 64))
	if got, _ := ClassifyHead(full, "/ws", 0, len(full)); got != HeadOther {
		t.Fatal("a full buffer without the end of the head must be left to net/http")
	}
}

// routeOracle is net/http itself: a real http.Server over in-memory pipes
// whose only route that answers 200 is GET /ws. routed reports whether
// head, sent alone on a fresh connection, reaches that handler.
type routeOracle struct {
	srv    *http.Server
	conns  chan net.Conn
	done   chan struct{} // Serve returned
	closed chan struct{} // the listener was closed
	once   sync.Once
}

func newRouteOracle(t testing.TB) *routeOracle {
	o := &routeOracle{conns: make(chan net.Conn), done: make(chan struct{}), closed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("X-Routed", "1")
		}
	})
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { o.srv.Serve(chanListener{o}); close(o.done) }()
	t.Cleanup(func() { o.srv.Close(); <-o.done })
	return o
}

func (o *routeOracle) routed(t tb, head []byte) bool {
	client, server := net.Pipe()
	defer client.Close()
	select {
	case o.conns <- server:
	case <-o.done:
		t.Fatal("oracle stopped")
	}
	go client.Write(head)
	client.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode == 200 && resp.Header.Get("X-Routed") == "1"
}

type chanListener struct{ o *routeOracle }

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.o.conns:
		return c, nil
	case <-l.o.closed:
		return nil, net.ErrClosed
	}
}
func (l chanListener) Close() error   { l.o.once.Do(func() { close(l.o.closed) }); return nil }
func (l chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// checkSplits: fed in two parts (the scan position carried over), the
// verdict is that of the whole; a prefix that already says pass was right.
func checkSplits(t tb, b []byte, whole HeadVerdict) {
	step := max(1, len(b)/64) // quadratic otherwise
	for k := 0; k < len(b); k += step {
		vk, s := ClassifyHead(b[:k], "/ws", 0, len(b)+1)
		switch vk {
		case HeadMore:
			if v, _ := ClassifyHead(b, "/ws", s, len(b)+1); v != whole {
				t.Fatalf("split at %d of %q: %d, whole %d", k, b, v, whole)
			}
		case HeadOther:
			if whole != HeadOther {
				t.Fatalf("prefix %q passed, whole %q is %d", b[:k], b, whole)
			}
		}
	}
}

func FuzzClassifyHead(f *testing.F) {
	for _, s := range []string{
		upgradeHead, healthHead, "GET /ws HTTP/1.0\r\n\r\n", "GET /ws?a=b HTTP/1.1\r\nHost: x:1\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: h\r\nX: \xff\xfe\r\n\r\n", "GET /ws HTTP/1.1\r\nHost:\r\n\r\n",
		"GET /ws?#x HTTP/1.1\r\nHost: h\r\n\r\n", "GET /ws?%zz HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
		"GET /ws? HTTP/1.1\r\nHost: h\r\n\r\n", "GET /ws?a?b HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /ws HTTP/1.1\r\nhost: h\r\nsec-websocket-key: k\r\nSEC-WEBSOCKET-PROTOCOL: a\r\nSec-WebSocket-Protocol: b\r\nSec-WebSocket-Keys: c\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nA: 10\r\n\r\n",
		"GET /ws HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\nPragma: no-cache\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	o := newRouteOracle(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxHead {
			return // never read further
		}
		v, _ := ClassifyHead(b, "/ws", 0, len(b)+1)
		checkSplits(t, b, v)
		if v == HeadSimple && !o.routed(t, b) {
			t.Fatalf("%q is simple, but net/http does not route it to GET /ws", b)
		}
		if v == HeadSimple {
			checkParseHead(t, b)
		}
	})
}

// checkParseHead: what ParseHead builds from a simple head is what
// http.ReadRequest reads from it (or it is left to net/http).
func checkParseHead(t tb, b []byte) {
	t.Helper()
	want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	got := ParseHead(context.Background(), b)
	if got == nil {
		if err == nil && !bytes.Contains(b, []byte("#")) {
			t.Fatalf("ParseHead leaves %q to net/http, which reads it", b)
		}
		return
	}
	if err != nil {
		t.Fatalf("ParseHead reads %q, which http.ReadRequest refuses: %v", b, err)
	}
	if got.Method != want.Method || got.URL.String() != want.URL.String() || got.RequestURI != want.RequestURI ||
		got.Proto != want.Proto || got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor ||
		got.Host != want.Host || got.Close != want.Close || got.ContentLength != want.ContentLength ||
		got.Body != http.NoBody || !reflect.DeepEqual(got.Header, want.Header) || got.URL.Path != "/ws" {
		t.Fatalf("%q:\n door %+v\n net/http %+v", b, got, want)
	}
}

// TestClassifyHeadProperty: every well-formed upgrade head, however its
// headers vary, is simple, and only once it is complete; net/http agrees.
func TestClassifyHeadProperty(t *testing.T) {
	o := newRouteOracle(t)
	token := rapid.StringOfN(rapid.SampledFrom([]rune("abcXYZ019!#$%&'*+-.^_`|~")), 1, 12, -1)
	value := rapid.StringOfN(rapid.SampledFrom([]rune("ab Z9;=,\t\"()/:?@[]{}\x80\xff")), 0, 30, -1)
	rapid.Check(t, func(rt *rapid.T) {
		var sb strings.Builder
		sb.WriteString("GET /ws")
		if rapid.Bool().Draw(rt, "query") {
			sb.WriteString("?" + rapid.StringOfN(rapid.SampledFrom([]rune("az09=&%-._~!$'()*+,;:@/?#[]")), 0, 40, -1).Draw(rt, "q"))
		}
		v11 := rapid.Bool().Draw(rt, "1.1")
		if v11 {
			sb.WriteString(" HTTP/1.1\r\n")
		} else {
			sb.WriteString(" HTTP/1.0\r\n")
		}
		hostAt := -1
		if v11 || rapid.Bool().Draw(rt, "host") {
			hostAt = rapid.IntRange(0, 3).Draw(rt, "hostAt")
		}
		n := rapid.IntRange(0, 4).Draw(rt, "n")
		for i := 0; i <= max(n, hostAt); i++ {
			if i == hostAt {
				sb.WriteString(rapid.SampledFrom([]string{"Host", "host", "HOST"}).Draw(rt, "hostName") + ": " +
					rapid.StringOfN(rapid.SampledFrom([]rune("a.z-0:9[]_")), 0, 20, -1).Draw(rt, "hostValue") + "\r\n")
			}
			if i < n {
				name := token.Draw(rt, "name")
				if asciiEqualFold([]byte(name), "host") || asciiEqualFold([]byte(name), "content-length") ||
					asciiEqualFold([]byte(name), "transfer-encoding") || asciiEqualFold([]byte(name), "expect") {
					name = "X-" + name
				}
				sb.WriteString(name + ":" + value.Draw(rt, "value") + "\r\n")
			}
		}
		if rapid.Bool().Draw(rt, "connection") {
			sb.WriteString("Connection: " + rapid.SampledFrom([]string{"close", "keep-alive", "Upgrade", "upgrade, Close", " Keep-Alive ,x"}).Draw(rt, "conn") + "\r\n")
		}
		if rapid.Bool().Draw(rt, "pragma") {
			sb.WriteString("Pragma: no-cache\r\n")
			if rapid.Bool().Draw(rt, "cacheControl") {
				sb.WriteString("Cache-Control: max-age=0\r\n")
			}
		}
		sb.WriteString("\r\n")
		b := []byte(sb.String())
		if v, _ := ClassifyHead(b, "/ws", 0, len(b)); v != HeadSimple {
			rt.Fatalf("%q: %d, want simple", b, v)
		}
		for k := range len(b) {
			if v, _ := ClassifyHead(b[:k], "/ws", 0, len(b)); v != HeadMore {
				rt.Fatalf("prefix %q: %d, want more", b[:k], v)
			}
		}
		checkSplits(rt, b, HeadSimple)
		if !o.routed(rt, b) {
			rt.Fatalf("net/http does not route %q to GET /ws", b)
		}
		checkParseHead(rt, b)
	})
}

// BenchmarkClassifyHead is the classification of a typical upgrade head.
func BenchmarkClassifyHead(b *testing.B) {
	head := []byte(upgradeHead)
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := ClassifyHead(head, "/ws", 0, MaxHead); v != HeadSimple {
			b.Fatal(v)
		}
	}
}

// ReadHead reads until the head is decided, however the client splits
// it, and stops at the end of the stream with what it has.
func TestReadHead(t *testing.T) {
	t.Run("byte at a time", func(t *testing.T) {
		server, client := pair(t)
		go func() {
			for i := range len(upgradeHead) {
				if _, err := client.Write([]byte{upgradeHead[i]}); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, MaxHead)
		n, v, err := ReadHead(server, buf, 0, "/ws")
		if err != nil || v != HeadSimple || string(buf[:n]) != upgradeHead {
			t.Fatalf("%d %q %v", v, buf[:n], err)
		}
	})
	t.Run("already read", func(t *testing.T) {
		server, _ := pair(t)
		buf := make([]byte, MaxHead)
		n := copy(buf, upgradeHead)
		if n, v, err := ReadHead(server, buf, n, "/ws"); err != nil || v != HeadSimple || n != len(upgradeHead) {
			t.Fatalf("%d %d %v", n, v, err)
		}
	})
	t.Run("gone mid-head", func(t *testing.T) {
		server, client := pair(t)
		client.Write([]byte(upgradeHead[:20]))
		client.Close()
		buf := make([]byte, MaxHead)
		n, v, err := ReadHead(server, buf, 0, "/ws")
		if err == nil || v != HeadMore || n != 20 {
			t.Fatalf("%d %d %v", n, v, err)
		}
	})
	t.Run("other", func(t *testing.T) {
		server, client := pair(t)
		client.Write([]byte(healthHead))
		buf := make([]byte, MaxHead)
		n, v, err := ReadHead(server, buf, 0, "/ws")
		if err != nil || v != HeadOther || n == 0 {
			t.Fatalf("%d %d %v", n, v, err)
		}
		r := Replay(server, buf[:n])
		got := make([]byte, len(healthHead))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != healthHead {
			t.Fatalf("replayed %q, %v", got, err)
		}
		if _, ok := r.(interface{ CloseWrite() error }); !ok {
			t.Fatal("Replay lost CloseWrite")
		}
	})
}

// Socket sees through a replayed head to the socket itself, and leaves
// any other connection as it is.
func TestSocketUnderReplay(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Socket(Replay(a, []byte("GET /"))); got != a {
		t.Fatalf("Socket(Replay(c)) = %T, want c", got)
	}
	if got := Socket(a); got != a {
		t.Fatalf("Socket(c) = %T, want c", got)
	}
}

// An upgrade's request is built in a few allocations (ParseHead says
// which): net/http's way took two or three per field.
func TestParseHeadAllocations(t *testing.T) {
	head := []byte("GET /ws HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: rtbench\r\nUpgrade: websocket\r\n" +
		"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Protocol: rtserver.batch.v1\r\nOrigin: http://example.com\r\n\r\n")
	if v, _ := ClassifyHead(head, "/ws", 0, MaxHead); v != HeadSimple {
		t.Fatalf("verdict %v", v)
	}
	checkParseHead(t, head)
	// The target, the five values no upgrade repeats, their slices, the
	// request, its URL, and the header map (two).
	if n := testing.AllocsPerRun(100, func() { ParseHead(context.Background(), head) }); n > 11 {
		t.Fatalf("ParseHead allocates %v times, want at most 11", n)
	}
}
