package wsock

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// clientFrame is a client's frame: head (FIN, RSV, opcode), the payload
// masked with a fixed key.
func clientFrame(head byte, payload []byte) []byte {
	b := []byte{head}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xFFFF:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// pipeConn is a connection whose input is given and whose output is
// recorded into a transcript.
type pipeConn struct {
	in     *bytes.Reader
	mu     sync.Mutex
	log    *transcript
	closed bool
}

func (p *pipeConn) Read(b []byte) (int, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	return p.in.Read(b)
}

func (p *pipeConn) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, net.ErrClosed
	}
	if p.log != nil {
		p.log.add("wrote % x", b)
	}
	return len(b), nil
}

func (p *pipeConn) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

func (p *pipeConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (p *pipeConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (p *pipeConn) SetDeadline(t time.Time) error      { return nil }
func (p *pipeConn) SetReadDeadline(t time.Time) error  { return nil }
func (p *pipeConn) SetWriteDeadline(t time.Time) error { return nil }

// transcript is what a reader did with an input: the messages it
// delivered and the frames it wrote, in order, then how it ended.
type transcript struct {
	events []string
	end    string
}

func (t *transcript) add(format string, args ...any) {
	t.events = append(t.events, fmt.Sprintf(format, args...))
}

func (t *transcript) String() string {
	return strings.Join(t.events, "\n") + "\nend: " + t.end
}

// readLimit is the message limit of the differential fuzz target: small,
// so that inputs reach it.
const readLimit = 64

// refusal is the end of a read the server answers with a close of its own.
func refusal(err error) string {
	switch {
	case errors.Is(err, ErrBinary):
		return "refused 1003"
	case errors.Is(err, ErrTooBig):
		return "refused 1009"
	case errors.Is(err, ErrInvalidUTF8):
		return "refused 1007"
	}
	return ""
}

// readByWsock reads input as the server's fast path does, and reports
// whether it ended on a refusal inside a frame the input cuts short, or
// at the end of the input inside a message (cut).
func readByWsock(input []byte) (log *transcript, cut bool) {
	log = &transcript{}
	pc := &pipeConn{in: bytes.NewReader(input), log: log}
	c := &Conn{Conn: pc}
	c.br = bufio.NewReaderSize(c, ReadBufferSize)
	var buf bytes.Buffer
	for {
		buf.Reset()
		op, err := c.ReadMessage(&buf, readLimit, false)
		if err == nil && op == 0 {
			continue
		}
		if err == nil {
			log.add("message %d %q", op, buf.Bytes())
			continue
		}
		var ce *CloseError
		switch r := refusal(err); {
		case r != "":
			log.end = r
			return log, c.unread > int64(pc.in.Len()+c.br.Buffered())
		case errors.As(err, &ce) && ce.Received:
			log.end = fmt.Sprintf("closed %d", ce.Code)
		default:
			log.end = "failed"
			cut = op != 0 && errors.Is(err, io.EOF)
		}
		return log, cut
	}
}

// libraryWriter makes a server-side connection of the WebSocket library
// over a pipeConn, as the server's upgrade does.
type libraryWriter struct {
	http.ResponseWriter
	pc *pipeConn
}

func (w *libraryWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.pc, bufio.NewReadWriter(bufio.NewReaderSize(w.pc, ReadBufferSize), bufio.NewWriterSize(w.pc, WriteBufferSize)), nil
}

// acceptOver accepts an upgrade over pc with the WebSocket library.
func acceptOver(t testing.TB, pc *pipeConn) *websocket.Conn {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	ws, err := websocket.Accept(&libraryWriter{ResponseWriter: httptest.NewRecorder(), pc: pc}, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// readByLibrary reads input as the server's portable path does.
func readByLibrary(t testing.TB, input []byte) *transcript {
	log := &transcript{}
	ws := acceptOver(t, &pipeConn{in: bytes.NewReader(input), log: log})
	defer ws.CloseNow()
	ws.SetReadLimit(readLimit + 1) // as the server: its own limit closes first
	var buf bytes.Buffer
	for {
		buf.Reset()
		typ, mr, err := ws.Reader(context.Background())
		if err == nil {
			op := Opcode(typ)
			if op == OpBinary {
				err = ErrBinary
			} else if err = ReadPayload(&buf, mr, readLimit, op == OpText); err == nil {
				log.add("message %d %q", op, buf.Bytes())
				continue
			}
		}
		var ce websocket.CloseError
		if r := refusal(err); r != "" {
			log.end = r
		} else if errors.As(err, &ce) && !utf8.ValidString(ce.Reason) {
			// The one rule wsock adds to the library's: a close reason
			// that is not UTF-8 fails the connection with 1007, where
			// the library echoes it.
			log.events[len(log.events)-1] = fmt.Sprintf("wrote % x", CloseFrame(invalidPayload, badCloseReason))
			log.end = "failed"
		} else if code := websocket.CloseStatus(err); code != -1 {
			log.end = fmt.Sprintf("closed %d", code)
		} else {
			log.end = "failed"
		}
		return log
	}
}

// compareReaders requires the same transcript of both readers. Two
// differences are allowed, both where the input ends inside a message:
//   - failing fast: where it ends inside a frame, the WebSocket library
//     fails at the cut without looking at the frame's first bytes, while
//     wsock, which checks each byte as it comes, may already have refused
//     them;
//   - where it ends between two frames of a message, or before a frame's
//     first payload byte, the library takes the end for the message's
//     (its reader returns io.EOF): it delivers what came as a whole message
//     (or refuses it 1007 for a character it cuts). wsock delivers a
//     message only with its final frame.
func compareReaders(t *testing.T, input []byte) {
	ours, cut := readByWsock(input)
	theirs := readByLibrary(t, input)
	if cut {
		same := strings.Join(ours.events, "\n") == strings.Join(theirs.events, "\n")
		switch {
		case same && theirs.end == "failed",
			ours.end == "failed" && same && theirs.end == "refused 1007",
			ours.end == "failed" && theirs.end == "failed" && len(theirs.events) == len(ours.events)+1 &&
				strings.Join(ours.events, "\n") == strings.Join(theirs.events[:len(ours.events)], "\n") &&
				strings.HasPrefix(theirs.events[len(ours.events)], "message "):
			return
		}
	}
	if ours.String() != theirs.String() {
		t.Fatalf("input % x\nwsock:\n%s\nlibrary:\n%s", input, ours, theirs)
	}
}

// The seeds: every case group of the conformance suite, as byte streams
// (also in testdata/fuzz/FuzzReaderMatchesLibrary, with what fuzzing
// found).
func readerSeeds() [][]byte {
	text := func(s string) []byte { return clientFrame(0x81, []byte(s)) }
	join := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	seeds := [][]byte{
		text("hello"),
		text(strings.Repeat("a", 126)),
		clientFrame(0x82, []byte("bin")),
		{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'},               // unmasked
		{0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, // a negative length
		join(clientFrame(0x89, []byte("ping")), text("after")),
		join(clientFrame(0x8A, []byte("pong")), text("after")),
		clientFrame(0x89, bytes.Repeat([]byte{'p'}, 126)),
		clientFrame(0x09, []byte("x")),
		clientFrame(0x08, []byte{3, 0xe8}),
		join(clientFrame(0x01, []byte("he")), clientFrame(0x89, nil), clientFrame(0x80, []byte("llo"))),
		join(clientFrame(0x01, []byte("he")), clientFrame(0x81, []byte("llo"))),
		clientFrame(0x80, []byte("x")),
		join(clientFrame(0x01, nil), clientFrame(0x00, []byte("x")), clientFrame(0x80, nil)),
		text("κόσμε"),
		join(clientFrame(0x01, []byte("\xce")), clientFrame(0x80, []byte("\xba"))),
		join(clientFrame(0x01, []byte("ok\xf4")), clientFrame(0x00, []byte("\x90\x80\x80")), clientFrame(0x80, nil)),
		text("\xff"), text("\xc0\xaf"), text("\xed\xa0\x80"), text("\xf4\x90\x80\x80"), text("\xce"),
		text("\xef\xbf\xbd"),
		clientFrame(0x81, []byte("a\xffbcdef"))[:9], // an invalid byte, its frame cut
		text(strings.Repeat("l", readLimit+1)),
		join(clientFrame(0x01, []byte(strings.Repeat("l", readLimit))), clientFrame(0x80, []byte("l"))),
		text(strings.Repeat("l", readLimit)),
		clientFrame(0x88, nil),
		clientFrame(0x88, []byte{3}),
		clientFrame(0x88, []byte{3, 0xe8, 'b', 'y', 'e'}),
		join(clientFrame(0x88, []byte{3, 0xe8}), text("after the close")),
		clientFrame(0x88, append([]byte{0x0f, 0xa0}, strings.Repeat("r", 123)...)),
		clientFrame(0x88, []byte{3, 0xe8, 'o', 'k', 0xff}),         // a reason that is not UTF-8
		clientFrame(0x88, []byte{3, 0xe8, 0xce, 0xba, 0xe1, 0xbd}), // cut inside a character
	}
	for _, code := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535} {
		seeds = append(seeds, clientFrame(0x88, []byte{byte(code >> 8), byte(code)}))
	}
	for _, head := range []byte{0xC1, 0xA1, 0x91, 0xF1, 0xC9, 0x83, 0x87, 0x8B, 0x8F} {
		seeds = append(seeds, clientFrame(head, []byte("x")))
	}
	return seeds
}

// FuzzReaderMatchesLibrary feeds the same client byte stream to wsock's
// frame reader and to the WebSocket library's (each under the server's
// rules: limit, UTF-8 as it arrives, binary refused) and requires the
// same messages, the same frames written (pongs, close frames: codes and
// reasons) and the same end. The long run is in README.md (Tests).
func FuzzReaderMatchesLibrary(f *testing.F) {
	for _, s := range readerSeeds() {
		f.Add(s)
	}
	f.Fuzz(compareReaders)
}

// UTF8 gives utf8.Valid's verdict however the input is cut, and fails
// at the first byte after which nothing could make it valid.
func FuzzUTF8(f *testing.F) {
	for _, s := range []string{"", "κόσμε", "\xce", "\xf4\x90\x80\x80", "a\xed\xa0\x80b", "\xef\xbf\xbd", "\xf0\x9f\x98"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for cut := 0; cut <= len(b); cut++ {
			var v UTF8
			ok := v.Write(b[:cut]) && v.Write(b[cut:]) && v.Complete()
			if ok != utf8.Valid(b) {
				t.Fatalf("% x cut at %d: %v, utf8.Valid %v", b, cut, ok, !ok)
			}
		}
		// Byte by byte: it fails exactly where no completion is valid.
		var v UTF8
		for i := range b {
			if !v.Write(b[i : i+1]) {
				if validPrefix(b[:i+1]) {
					t.Fatalf("% x failed at byte %d, which a valid text can start with", b, i)
				}
				return
			}
			if !validPrefix(b[:i+1]) {
				t.Fatalf("% x not failed at byte %d", b, i)
			}
		}
	})
}

// validPrefix reports whether some bytes after p make valid UTF-8.
func validPrefix(p []byte) bool {
	for _, tail := range [][]byte{nil, {0x80}, {0x80, 0x80}, {0x80, 0x80, 0x80}, {0x90, 0x80, 0x80}, {0xA0, 0x80}, {0xBF}} {
		if utf8.Valid(append(append([]byte(nil), p...), tail...)) {
			return true
		}
	}
	return false
}

// Reading a message, fragments, a ping and its pong allocates nothing
// once the buffer has grown.
func TestReadMessageAllocatesNothing(t *testing.T) {
	in := bytes.Join([][]byte{
		clientFrame(0x8A, nil),
		clientFrame(0x01, []byte(`{"jsonrpc":"2.0",`)),
		clientFrame(0x89, []byte("p")),
		clientFrame(0x80, []byte(`"method":"publish","params":{"topic":"κόσμε"}}`)),
	}, nil)
	r := bytes.NewReader(in)
	c := &Conn{Conn: &pipeConn{in: r}}
	c.br = bufio.NewReaderSize(c, ReadBufferSize)
	var buf bytes.Buffer
	buf.Grow(1024)
	read := func() {
		r.Reset(in)
		c.br.Reset(c)
		buf.Reset()
		if op, err := c.ReadMessage(&buf, 1<<10, false); op != OpText || err != nil {
			t.Fatalf("the message: %d %v", op, err)
		}
	}
	read()
	if n := testing.AllocsPerRun(100, read); n != 0 {
		t.Fatalf("a read allocates %v times, want 0", n)
	}
	if want := `{"jsonrpc":"2.0","method":"publish","params":{"topic":"κόσμε"}}`; buf.String() != want || c.Pongs() == 0 {
		t.Fatalf("read %q (pongs %d), want %q", buf.String(), c.Pongs(), want)
	}
}

// A publish read by wsock's reader and by the WebSocket library's (with
// the same payload rule), from memory: the read path's own cost.
func BenchmarkReadMessage(b *testing.B) {
	msg := clientFrame(0x81, []byte(`{"jsonrpc":"2.0","id":7,"method":"publish","params":{"topic":"room:1","data":{"text":"hello κόσμε, hello world"}}}`))
	const batch = 1000
	in := bytes.Repeat(msg, batch)
	var buf bytes.Buffer
	b.Run("wsock", func(b *testing.B) {
		r := bytes.NewReader(in)
		c := &Conn{Conn: &pipeConn{in: r}}
		c.br = bufio.NewReaderSize(c, ReadBufferSize)
		b.ReportAllocs()
		for i := range b.N {
			if i%batch == 0 {
				r.Reset(in)
				c.br.Reset(c)
			}
			buf.Reset()
			if _, err := c.ReadMessage(&buf, 1<<16, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		var ws *websocket.Conn
		b.ReportAllocs()
		for i := range b.N {
			if i%batch == 0 {
				b.StopTimer()
				if ws != nil {
					ws.CloseNow()
				}
				ws = acceptOver(b, &pipeConn{in: bytes.NewReader(in)})
				ws.SetReadLimit(1<<16 + 1)
				b.StartTimer()
			}
			buf.Reset()
			typ, mr, err := ws.Reader(context.Background())
			if err == nil {
				err = ReadPayload(&buf, mr, 1<<16, typ == websocket.MessageText)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		ws.CloseNow()
	})
}
