package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

// smallReceive is the receive buffer of a client that stops reading: small,
// yet at least twice the loopback interface's 64 KiB segments. Below that,
// a client that reads again is sent its backlog only by the sender's
// zero-window probes, which back off to minutes (Linux advertises no
// window smaller than a segment).
const smallReceive = 128 << 10

// A subscriber with a small receive buffer that stops reading is cut off
// with 1013, whichever limit says so first: its queue passing
// sendQueueBytes while the socket is full, or one write waiting
// writeTimeout. Its close frame waits behind what its socket already
// holds; once it reads again, it gets those messages whole and in order,
// then the 1013 with a retry hint.
func TestStalledReaderGets1013OnceItReadsAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"queue passes sendQueueBytes", Config{SendQueueBytes: 64 << 10, WriteTimeout: time.Hour}},
		{"a write waits writeTimeout", Config{SendQueueBytes: 1 << 30, WriteTimeout: time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			m := metrics.NewDiscard()
			tc.cfg.PingInterval = time.Hour // the close frame's bound (closeWait): never reached here
			s, url := startServer(t, Deps{Metrics: m}, tc.cfg)
			stalled := wstest.DialSmallReceive(t, url, smallReceive)
			wstest.MustOK(t, stalled.Call("subscribe", `{"topic":"feed"}`))
			pub := wstest.Dial(t, url)

			data := strings.Repeat("p", 8<<10)
			for i := 0; testutilValue(m.SlowConsumerDisconnects) == 0; i++ {
				if i == 100_000 {
					t.Fatal("800 MB published to a client that reads nothing, and no cut")
				}
				pub.Send(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"feed","data":{"i":` + strconv.Itoa(i) + `,"p":"` + data + `"}}}`)
			}
			// The close is under way while the client reads nothing: its
			// frame waits for the socket the client has filled (or, with
			// no descriptor, the library waits for the client's answer).
			testkit.Eventually(t, 10*time.Second, "the close is under way", func() bool {
				if open, _ := s.Counts(); open < 2 {
					return true // over already: its frame went to the socket
				}
				return bytes.Contains(allStacks(), []byte("server.(*conn).closeBy("))
			})

			last := -1
			for {
				b, err := stalled.Read()
				if err != nil {
					var ce websocket.CloseError
					if !errors.As(err, &ce) || ce.Code != websocket.StatusTryAgainLater {
						t.Fatalf("after %d messages: %v, want close 1013", last+1, err)
					}
					wstest.RetryHint(t, ce.Reason)
					break
				}
				var f wstest.Frame
				var d struct{ I int }
				if json.Unmarshal(b, &f) != nil || json.Unmarshal(f.Params.Data, &d) != nil || d.I <= last {
					t.Fatalf("after message %d: %.40q", last, b)
				}
				last = d.I
			}
			if v := testutilValue(m.SlowConsumerDisconnects); v != 1 {
				t.Fatalf("slow_consumer_disconnects_total = %v, want 1", v)
			}
		})
	}
}

// A hard stop (Shutdown) closes each client with 1001, and a client whose
// socket is full does not hold it up: Shutdown returns, the idle client
// gets 1001, and the stalled one's socket is closed.
func TestShutdownSays1001AndDoesNotWaitForAStalledClient(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.NewDiscard()
	s, url := startServer(t, Deps{Metrics: m}, Config{SendQueueBytes: 1 << 30, WriteTimeout: time.Hour})
	idle := wstest.Dial(t, url)
	stalled := wstest.DialSmallReceive(t, url, smallReceive)
	wstest.MustOK(t, stalled.Call("subscribe", `{"topic":"feed"}`))
	wstest.MustOK(t, idle.Call("subscribe", `{"topic":"other"}`))
	data := json.RawMessage(`"` + strings.Repeat("p", 8<<10) + `"`)
	// Publish until a writer waits on the stalled client's full socket.
	testkit.Eventually(t, 10*time.Second, "a writer waits on a full socket", func() bool {
		for range 16 {
			if err := s.Publish("feed", data); err != nil {
				t.Fatal(err)
			}
		}
		return bytes.Contains(allStacks(), []byte("wsock.(*Conn).Send("))
	})

	var wg sync.WaitGroup
	var idleCode websocket.StatusCode
	wg.Go(func() { idleCode, _ = idle.CloseStatus() })
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if idleCode != websocket.StatusGoingAway {
		t.Fatalf("idle client closed %d, want 1001", idleCode)
	}
	if code, _ := stalled.CloseStatus(); code == websocket.StatusGoingAway {
		t.Log("the stalled client's socket took the 1001 after all")
	}
}
