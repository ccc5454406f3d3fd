package server

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// Built-in method names (docs/protocol.md, "Built-in methods"), as the
// protocol declares them.
const (
	MethodSubscribe   = protocol.MethodSubscribe
	MethodUnsubscribe = protocol.MethodUnsubscribe
	MethodPublish     = protocol.MethodPublish
	MethodHistory     = protocol.MethodHistory
)

// builtinMethods are the methods the server answers itself. Each reads
// its params with package protocol's decoders, by one exact rule (names
// case-sensitive, a repeated member -32600, docs/protocol.md); a test
// walks this list and proves it for every member of every method.
var builtinMethods = [...]string{MethodSubscribe, MethodUnsubscribe, MethodPublish, MethodRefresh,
	MethodPresence, MethodPresenceStats, MethodHistory}

func isBuiltin(m string) bool {
	for _, b := range builtinMethods {
		if m == b {
			return true
		}
	}
	return false
}

var emptyResult = json.RawMessage("{}")

// dispatch runs one valid request: a built-in inline, or an application
// handler. Every method is classified and checked by the message tier
// first; raw is the whole request object for a single (non-batch) frame.
func (c *conn) dispatch(r *protocol.Request, raw []byte) (json.RawMessage, *protocol.Error) {
	switch r.Method {
	case MethodSubscribe, MethodUnsubscribe, MethodPublish, MethodHistory:
		return c.builtinCall(r, raw)
	case MethodRefresh:
		return c.refresh(r)
	case MethodPresence, MethodPresenceStats:
		return c.presenceCall(r, raw)
	}
	return c.appCall(r, raw)
}

// requestBytes is a call's size for cost parts (of: bytes, fanout): the
// frame of a single request; for an element of a batch, which has no frame
// of its own, its params.
func requestBytes(r *protocol.Request, raw []byte) int64 {
	if raw != nil {
		return int64(len(raw))
	}
	return int64(len(r.Params))
}

func (c *conn) builtinCall(r *protocol.Request, raw []byte) (json.RawMessage, *protocol.Error) {
	s := c.s
	p, perr := r.TopicParams(r.Method == MethodPublish)
	if perr != nil {
		return nil, perr
	}
	if r.Method != MethodUnsubscribe {
		// Grants first: a refused call spends no rate or cost budget and
		// does not count as a publish attempt.
		if perr := c.grant(r.Method, p.Topic); perr != nil {
			return nil, perr
		}
	}
	call := c.builtinCallOf(r.Method, p.Topic)
	defer endBuiltinCall(call)
	call.Params, call.Bytes = r.Params, requestBytes(r, raw)
	var subs []*conn
	if r.Method == MethodPublish {
		// What a fan-out cost part charges: this instance's subscribers,
		// the list a built-in publish delivers to.
		subs = s.hub.subscribers(p.Topic)
		call.Subscribers = int64(len(subs))
	}
	if r.Method == MethodPublish && s.pressure != nil {
		// Attempts count for top publishers whether admitted or not, so a
		// publisher that keeps hammering stays shed until it slows down.
		// An anonymous publisher counts under its IP, the user key a rule
		// by user reads for it (docs/admission.md).
		s.pressure.RecordAttempt(p.Topic, c.userKey(), len(p.Data))
	}
	perr = c.admit(call)
	// Only Check reads Params: the pooled call must not pin this
	// frame's buffer.
	call.Params = nil
	if perr != nil {
		return nil, perr
	}
	defer call.Release()
	if r.Method != MethodUnsubscribe {
		if pol := s.hist.policyOf(p.Topic); pol.Enabled() || r.Method == MethodHistory {
			switch r.Method {
			case MethodSubscribe:
				return c.subscribeHistory(p.Topic, r.Params, pol)
			case MethodPublish:
				// A single request may be answered later: its answer
				// needs no batch around it.
				return c.publishHistory(p.Topic, compactData(p.Data), r.Params, pol, raw != nil, r.ID)
			default:
				return c.historyCall(p.Topic, r.Params, pol)
			}
		}
	}
	switch r.Method {
	case MethodSubscribe:
		if perr := c.addSub(p.Topic); perr != nil {
			return nil, perr
		}
		s.awaitPresence(p.Topic)
	case MethodUnsubscribe:
		c.removeSub(p.Topic)
	case MethodPublish:
		data := compactData(p.Data)
		// The bus first: a publish it cannot take (full, or Redis down)
		// is shed and delivered nowhere, so success always means every
		// instance gets it (docs/cluster.md).
		if err := s.bus.Publish(p.Topic, data); err != nil {
			s.log.Debug("bus refused a publish", "topic", p.Topic, "err", err)
			return nil, c.busShed()
		}
		s.hub.publishTo(subs, p.Topic, data, c.holder())
		if s.pressure != nil {
			s.pressure.RecordPublished(1)
		}
	}
	return emptyResult, nil
}

// compactData strips insignificant whitespace so every subscriber frame is
// as small as it can be; data that is already compact is returned as is.
func compactData(d json.RawMessage) json.RawMessage {
	if !hasSpace(d) {
		return d
	}
	var b bytes.Buffer
	if json.Compact(&b, d) != nil {
		return d
	}
	return b.Bytes()
}

// grant asks the topic grants whether this connection may subscribe to
// or publish on topic: -32003 when no grant allows, -32005 when a grant's
// backend failed and nothing else allowed, both with data {"topic": T}.
func (c *conn) grant(method, topic string) *protocol.Error {
	a := c.s.access
	if a == nil {
		return nil
	}
	act := access.Subscribe
	if method == MethodPublish {
		act = access.Publish
	}
	q := access.Question{Action: act, Topic: topic, User: c.ticket.User, Claim: c.ticket.Topics, ConnID: c.id, IP: c.ticket.IP}
	switch a.Check(&c.ctx, q) {
	case access.Allow:
		return nil
	case access.Unavailable:
		return protocol.NewError(protocol.CodeUpstream, "", protocol.TopicData{Topic: topic})
	}
	return protocol.NewError(protocol.CodeForbidden, "", protocol.TopicData{Topic: topic})
}

// admit checks call against its method's class. A shed call answers -32001,
// one denied by a per-key budget (RATE, COST) -32002, with the data fields
// of docs/protocol.md.
func (c *conn) admit(call *message.Call) *protocol.Error {
	if c.s.router == nil {
		return nil
	}
	cls := c.s.router.ClassOf(call.Method)
	if cls == nil {
		return nil
	}
	d := cls.Check(call)
	if d.Allowed {
		return nil
	}
	retry := d.RetryAfterMillis()
	if message.IsRateLimited(d.Reason) {
		data := protocol.RateLimitedData{Class: cls.Name(), RetryAfterMs: retry, Limit: d.Limit, Remaining: d.Remaining}
		if d.Reason == message.ReasonCost {
			data.Reason = d.Reason
		}
		return protocol.NewError(protocol.CodeRateLimited, "", data)
	}
	return protocol.NewError(protocol.CodeOverloaded, "", protocol.OverloadedData{
		Class: cls.Name(), Reason: d.Reason, RetryAfterMs: retry,
	})
}

// appCall runs an application RPC: a registered handler, else the
// fallback (RPC proxy), else -32601.
func (c *conn) appCall(r *protocol.Request, raw []byte) (result json.RawMessage, perr *protocol.Error) {
	s := c.s
	var h Handler
	if v, ok := s.handlers.Load(r.Method); ok {
		h = v.(Handler)
	} else if s.fallback != nil {
		h = s.fallback
	} else {
		return nil, protocol.NewError(protocol.CodeMethodNotFound, "", nil)
	}
	call := &message.Call{
		Method: r.Method, User: c.ticket.User, IP: c.ticket.IPKey, ConnID: c.id,
		Bytes: requestBytes(r, raw), Params: r.Params,
	}
	if perr := c.admit(call); perr != nil {
		return nil, perr
	}
	// The lease is released exactly once: here when the handler returns or
	// panics, or by cleanup if the connection dies first. An adaptive limit
	// learns from the outcome: a panic, an internal or upstream error, or a
	// client gone before the answer counts as dropped.
	outcome := message.Dropped
	defer func() { call.ReleaseWith(outcome) }()
	if !c.track(call) {
		return nil, protocol.NewError(protocol.CodeInternal, "connection closed", nil)
	}
	defer c.untrack(call)

	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panicked", "method", r.Method, "panic", p)
			result, perr = nil, protocol.NewError(protocol.CodeInternal, "", nil)
		}
	}()
	req := &Request{Method: r.Method, Params: r.Params, Raw: raw, ID: r.ID, User: c.ticket.User, Claims: c.ticket.Claims, IP: c.ticket.IPKey, ConnID: c.id}
	v, err := h(&c.ctx, req)
	outcome = callOutcome(&c.ctx, err)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	switch v := v.(type) {
	case nil:
		return emptyResult, nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, protocol.NewError(protocol.CodeInternal, "", nil)
		}
		return v, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, protocol.NewError(protocol.CodeInternal, "", nil)
	}
	return b, nil
}

// callOutcome is how a handler's call ended, for an adaptive concurrency
// limit: dropped when the client is gone or the handler failed for reasons
// of its own (internal or upstream error: a timeout, a failing backend);
// completed otherwise, including errors the client caused (bad params,
// forbidden).
func callOutcome(ctx context.Context, err error) message.Outcome {
	if ctx.Err() != nil {
		return message.Dropped
	}
	if err != nil {
		switch protocol.AsError(err).Code {
		case protocol.CodeInternal, protocol.CodeUpstream:
			return message.Dropped
		}
	}
	return message.Completed
}

// hasSpace reports whether d holds a JSON whitespace byte. A loop over
// the bytes: bytes.ContainsAny builds its byte set on every call, which
// cost more than the scan for the short data of a typical publish.
func hasSpace(d []byte) bool {
	for _, b := range d {
		if b <= ' ' && (b == ' ' || b == '\t' || b == '\r' || b == '\n') {
			return true
		}
	}
	return false
}

// userKey is the key a per-user budget or rate counts this connection
// under: its user, or its client IP when it is anonymous.
func (c *conn) userKey() string {
	if c.ticket.User != "" {
		return c.ticket.User
	}
	return c.ticket.IPKey
}
