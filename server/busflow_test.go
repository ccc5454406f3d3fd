package server

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/protocol"
)

// refusingBus is a bus that refuses every publish while full is set, and
// keeps the Receiver so a test can play the other instances.
type refusingBus struct {
	*bus.Memory
	full atomic.Bool
	recv bus.Receiver
}

func (b *refusingBus) Start(ctx context.Context, r bus.Receiver) error {
	b.recv = r
	return b.Memory.Start(ctx, r)
}

func (b *refusingBus) Publish(topic string, data []byte) error {
	if b.full.Load() {
		return bus.ErrQueueFull
	}
	return b.Memory.Publish(topic, data)
}

// A publish the bus refuses is shed with -32001 reason BUS and a retry
// hint and reaches no subscriber, not even on this instance; the pressure
// monitor then reports BUS, so a class listing it sheds at once.
func TestBusRefusalShedsThePublish(t *testing.T) {
	leakcheck.Check(t)
	tr := newTier(t, "pub", message.Rule{Reasons: []pressure.Reason{pressure.Bus}}, map[string]string{"publish": "pub"})
	b := &refusingBus{Memory: bus.NewMemory(nil, tr.m)}
	_, url := startServer(t, Deps{Metrics: tr.m, Bus: b, Router: tr.router, Pressure: tr.mon})
	sub, pub := wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"t"}`))

	b.full.Store(true)
	f := pub.Call("publish", `{"topic":"t","data":"refused"}`)
	if f.Error == nil || f.Error.Code != protocol.CodeOverloaded {
		t.Fatalf("publish the bus refused: %+v, want -32001", f)
	}
	var d protocol.OverloadedData
	if err := json.Unmarshal(f.Error.Data, &d); err != nil || d.Reason != message.ReasonBus || d.Class != "pub" || d.RetryAfterMs <= 0 {
		t.Fatalf("-32001 data %s, want class pub, reason BUS and a retry hint", f.Error.Data)
	}
	b.full.Store(false)
	wstest.MustOK(t, pub.Call("publish", `{"topic":"t","data":"taken"}`))
	if got := sub.ExpectMessage("t"); got != `"taken"` {
		t.Fatalf("subscriber got %s first, want only the publish the bus took", got)
	}

	tr.mon.Sample()
	if r := tr.mon.Snapshot().Reason; r != pressure.Bus {
		t.Fatalf("pressure reason after a bus refusal: %v, want BUS", r)
	}
	f = pub.Call("publish", `{"topic":"t","data":"early"}`)
	if f.Error == nil || f.Error.Code != protocol.CodeOverloaded {
		t.Fatalf("publish in a class listing BUS while BUS is active: %+v, want -32001", f)
	}
}

// A gap the bus reports reaches the topic's subscribers as a system
// event naming the topic, and no one else.
func TestBusGapTellsTheTopicsSubscribers(t *testing.T) {
	leakcheck.Check(t)
	b := &refusingBus{Memory: bus.NewMemory(nil, nil)}
	_, url := startServer(t, Deps{Bus: b})
	sub, other := wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"t"}`))
	wstest.MustOK(t, other.Call("subscribe", `{"topic":"u"}`))

	b.recv.Deliver("t", []byte(`1`))
	b.recv.Gap("t")
	b.recv.Deliver("t", []byte(`2`))
	b.recv.Deliver("u", []byte(`"fence"`))
	if got := sub.ExpectMessage("t"); got != "1" {
		t.Fatalf("first %s", got)
	}
	if f := sub.Recv(); f.Method != "system" || f.Params.Event != protocol.EventGap || f.Params.Topic != "t" {
		t.Fatalf("after message 1: %+v, want the gap event on t", f)
	}
	if got := sub.ExpectMessage("t"); got != "2" {
		t.Fatalf("after the gap %s", got)
	}
	if f := other.Recv(); f.Method != "message" || f.Params.Topic != "u" {
		t.Fatalf("a subscriber of another topic got %+v before its fence", f)
	}
}
