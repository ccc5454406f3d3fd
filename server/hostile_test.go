package server

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/protocol"
)

// batchOf is a batch frame of n copies of elem.
func batchOf(elem string, n int) string {
	return "[" + strings.Repeat(elem+",", n-1) + elem + "]"
}

// A batch of more than protocol.MaxBatch requests is refused as a whole
// with one error object, whatever its size: its answer never grows with
// the number of elements.
func TestOversizeBatchIsRefusedWhole(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	c := wstest.Dial(t, url)
	for _, n := range []int{protocol.MaxBatch + 1, 20000} {
		c.Send(batchOf(`{}`, n))
		b := c.RecvRaw()
		var f wstest.Frame
		if err := json.Unmarshal(b, &f); err != nil || f.Error == nil || f.Error.Code != protocol.CodeInvalidRequest {
			t.Fatalf("batch of %d answered %s, want one -32600 object", n, b)
		}
		if len(b) > 200 {
			t.Fatalf("batch of %d answered with %d bytes", n, len(b))
		}
	}
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"t"}`)) // the connection stays
}

// Invalid elements of a batch count toward the 1008 one by one: a valid
// request beside them does not reset the count.
func TestInvalidBatchElementsCountToward1008(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	c := wstest.Dial(t, url)
	valid := `{"jsonrpc":"2.0","id":"ok","method":"subscribe","params":{"topic":"t"}}`
	c.Send("[" + valid + "," + batchOf(`{"id":1}`, maxInvalid-1)[1:])
	var answers []json.RawMessage
	if err := json.Unmarshal(c.RecvRaw(), &answers); err != nil || len(answers) != maxInvalid {
		t.Fatalf("first batch: %d answers (%v), want %d", len(answers), err, maxInvalid)
	}
	// One more invalid element, beside a valid request, reaches the limit.
	c.Send(`[` + valid + `,{"id":2}]`)
	if code, reason := c.CloseStatus(); code != websocket.StatusPolicyViolation {
		t.Fatalf("close %d %q, want 1008", code, reason)
	}
}

// A client that sends requests and never reads their answers is closed
// with 1013 once its backlog passes SendQueueBytes, as a subscriber that
// does not read its deliveries is.
func TestUnreadRepliesClose1013(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.NewDiscard()
	const queue = 64 << 10
	_, url := startServer(t, Deps{Metrics: m}, Config{SendQueueBytes: queue})
	c := wstest.Dial(t, url)
	// 100 calls of an unknown method, each with a 500-byte id: about
	// 60 KB of answers per frame.
	id := strings.Repeat("i", 500)
	frame := batchOf(`{"jsonrpc":"2.0","id":"`+id+`","method":"nope"}`, protocol.MaxBatch)
	for i := 0; testutilValue(m.SlowConsumerDisconnects) == 0; i++ {
		if i > 10000 {
			t.Fatal("10,000 unread answers and no 1013")
		}
		if !c.TrySend(frame) {
			break
		}
	}
	if code, reason := c.CloseStatus(); code != websocket.StatusTryAgainLater {
		t.Fatalf("close %d %q, want 1013", code, reason)
	}
}

// The answer to one frame holds at most SendQueueBytes of responses: a
// response that would pass it is answered -32004 with the limit.
func TestAnswerOverSendQueueIsRefused(t *testing.T) {
	leakcheck.Check(t)
	const queue = 32 << 10
	s, url := startServer(t, Deps{}, Config{SendQueueBytes: queue})
	big := json.RawMessage(`"` + strings.Repeat("x", queue/4) + `"`)
	s.Handle("big", func(context.Context, *Request) (any, error) { return big, nil })
	c := wstest.Dial(t, url)
	call := func(id int) string {
		return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"big"}`
	}
	c.Send("[" + call(1) + "," + call(2) + "," + call(3) + "," + call(4) + "]")
	b := c.RecvRaw()
	var answers []wstest.Frame
	if err := json.Unmarshal(b, &answers); err != nil || len(answers) != 4 {
		t.Fatalf("answer %d bytes, %d elements (%v)", len(b), len(answers), err)
	}
	if len(b) > queue+200 {
		t.Fatalf("answer of %d bytes, over the %d-byte queue", len(b), queue)
	}
	for i, a := range answers {
		if want := i == 3; (a.Error != nil && a.Error.Code == protocol.CodeLimitExceeded) != want {
			t.Fatalf("answer %d: %+v (limit exceeded: want %v)", i, a, want)
		}
	}
	// A single response over the queue is refused the same way.
	huge := json.RawMessage(`"` + strings.Repeat("x", queue) + `"`)
	s.Handle("huge", func(context.Context, *Request) (any, error) { return huge, nil })
	if f := c.Call("huge", `{}`); f.Error == nil || f.Error.Code != protocol.CodeLimitExceeded {
		t.Fatalf("huge answer: %+v", f)
	}
}

// Params nested deeper than MaxJSONDepth never reach a handler.
func TestDeepParamsNeverReachAHandler(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{}, Config{MaxJSONDepth: 8})
	var called atomic.Int32
	s.Handle("m", func(context.Context, *Request) (any, error) { called.Add(1); return nil, nil })
	c := wstest.Dial(t, url)
	deep := strings.Repeat("[", 8) + strings.Repeat("]", 8) // 9 levels with the request
	c.Send(`{"jsonrpc":"2.0","id":1,"method":"m","params":` + deep + `}`)
	if f := c.Recv(); f.Error == nil || f.Error.Code != protocol.CodeInvalidRequest {
		t.Fatalf("deep params: %+v", f)
	}
	wstest.MustOK(t, c.Call("m", deep[1:len(deep)-1]))
	if n := called.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
}
