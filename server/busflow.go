package server

import (
	"time"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// What the bus's flow control means for clients: a publish the bus could
// not take is shed like a message-tier denial (-32001, reason BUS, with a
// retry hint), never acknowledged; messages lost on their way in from
// another instance are announced to the topic's subscribers.

// busRetryAfter is the base of the (jittered) retry hint of a publish the
// bus refused: about the time for a full send queue to drain a few batches.
const busRetryAfter = 100 * time.Millisecond

// busShed is the answer to a publish the bus refused (full, or Redis
// down): -32001 reason BUS, the publish's class when it has one. The
// publish was not delivered anywhere, so a retry cannot duplicate it.
func (c *conn) busShed() *protocol.Error {
	class := ""
	if r := c.s.router; r != nil {
		if cls := r.ClassOf(MethodPublish); cls != nil {
			class = cls.Name()
		}
	}
	if c.s.pressure != nil {
		c.s.pressure.RecordBusShed()
	}
	return protocol.NewError(protocol.CodeOverloaded, "", protocol.OverloadedData{
		Class: class, Reason: message.ReasonBus, RetryAfterMs: hintMillis(busRetryAfter),
	})
}

// Gap tells topic's subscribers here that messages from other instances
// were lost on the way (this instance fell behind what Redis pushed).
func (r *busReceiver) Gap(topic string) {
	s := (*Server)(r)
	if s.hist.gap(topic) {
		return // a history topic fills the gap from its store (history.go)
	}
	subs := s.hub.subscribers(topic)
	if len(subs) == 0 {
		return
	}
	frame := frameText(protocol.AppendGap(nil, topic))
	for _, c := range subs {
		if c.enqueueFrame(frame, false) {
			s.m.MessagesSent.Inc()
		}
	}
}
