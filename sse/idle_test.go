package sse

import (
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rtserver/rtserver/internal/testkit"
)

// What an idle stream holds of its own, beside its server connection and
// its client's socket, is its pipe and its entry in the session map; the
// parts only one kind of pipe uses hang off pointers the others leave
// nil. The pipe stays in the 160-byte size class (docs/transports.md,
// "What an idle stream costs"): a field that every stream would pay for
// is a decision, not a drift.
func TestAnIdleStreamHoldsOnlyWhatItUses(t *testing.T) {
	if n := unsafe.Sizeof(pipe{}); n > 160 {
		t.Errorf("a pipe is %d bytes, want at most 160", n)
	}
	if p := newPipe(nil, modeRPC); p.ev != nil || p.call != nil {
		t.Error("an rpc stream's pipe holds an event stream's or a POST's state")
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
