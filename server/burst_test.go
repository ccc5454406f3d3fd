package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

// The send queue limit is about clients that do not read, not about
// bursts: with a 64 KiB limit, a subscriber that reads continuously gets
// every message of a 20,000-message burst of ~950-byte messages published
// as fast as the server answers (64 publishes in flight), while one that
// stops reading is still closed with 1013. (Before the limit counted only
// bytes the socket would not take, the reader was cut off after 500 to
// 4,000 messages: bytes waited for the writer goroutine to be scheduled.)
func TestBurstReachesContinuousReaderStalledOneIsCutOff(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	m := metrics.NewDiscard()
	_, url := startServer(t, Deps{Metrics: m}, Config{SendQueueBytes: 65536})
	healthy, stalled, pub := wstest.Dial(t, url), wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, healthy.Call("subscribe", `{"topic":"burst"}`))
	wstest.MustOK(t, stalled.Call("subscribe", `{"topic":"burst"}`))

	// 20,000 messages of ~950 bytes (19 MB) are several times what the
	// stalled subscriber's socket buffers hold. Under the race detector
	// the run is a tenth as long, with messages ten times larger so the
	// stalled socket still fills.
	const window = 64
	n, pad := 20000, strings.Repeat("x", 900)
	if raceEnabled {
		n, pad = 2000, strings.Repeat("x", 9000)
	}

	healthyDone := make(chan string, 1)
	go func() {
		for i := range n {
			b, err := healthy.Read()
			if err != nil {
				healthyDone <- "read " + strconv.Itoa(i) + ": " + err.Error()
				return
			}
			// A prefix check, not a decode: the reader must stay cheap to
			// keep reading continuously (even under the race detector).
			want := `{"jsonrpc":"2.0","method":"message","params":{"topic":"burst","data":{"i":` + strconv.Itoa(i) + `,"p":"`
			if !bytes.HasPrefix(b, []byte(want)) {
				healthyDone <- "message " + strconv.Itoa(i) + " missing or out of order: " + string(b[:min(len(b), 80)])
				return
			}
		}
		healthyDone <- ""
	}()

	// The stalled subscriber reads nothing until the server has cut it
	// off, then reads to its end (the close frame follows what the
	// server had written before the cut).
	type closed struct {
		code   websocket.StatusCode
		reason string
	}
	stalledDone := make(chan closed, 1)
	go func() {
		for testutilValue(m.SlowConsumerDisconnects) == 0 {
			select {
			case <-t.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		code, reason := stalled.CloseStatus()
		stalledDone <- closed{code, reason}
	}()

	// The publisher keeps 64 publishes unanswered: a slot is taken per
	// publish and given back per answer.
	slots := make(chan struct{}, window)
	answers := make(chan string, 1)
	go func() {
		for range n {
			b, err := pub.Read()
			if err != nil {
				answers <- err.Error()
				return
			}
			var f wstest.Frame
			if json.Unmarshal(b, &f) != nil || f.Error != nil || f.ID == nil {
				answers <- "publish answered " + string(b)
				return
			}
			<-slots
		}
		answers <- ""
	}()
	for i := range n {
		slots <- struct{}{}
		if !pub.TrySend(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"publish","params":{"topic":"burst","data":{"i":` + strconv.Itoa(i) + `,"p":"` + pad + `"}}}`) {
			t.Fatalf("publish %d: write failed", i)
		}
	}
	if msg := <-answers; msg != "" {
		t.Fatalf("publisher: %s", msg)
	}
	if msg := <-healthyDone; msg != "" {
		t.Fatalf("healthy subscriber: %s", msg)
	}
	var st closed
	select {
	case st = <-stalledDone:
	case <-time.After(time.Minute): // a hang guard, not a threshold
		t.Fatal("the stalled subscriber was never cut off with 1013")
	}
	if st.code != websocket.StatusTryAgainLater {
		t.Fatalf("stalled subscriber closed with %d %q, want 1013", st.code, st.reason)
	}
	if v := testutilValue(m.SlowConsumerDisconnects); v != 1 {
		t.Fatalf("slow_consumer_disconnects_total = %v, want 1 (the stalled one only)", v)
	}
}
