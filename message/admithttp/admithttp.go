package admithttp

import (
	"context"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rtserver/rtserver/internal/clientip"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/internal/admittrace"
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	key        func(*http.Request) string
	describe   func(*http.Request, *message.Call)
	trusted    []netip.Prefix
	dropOn5xx  bool
	onGone     bool
	onReleased func(message.Outcome) // tests: called by the one release
}

// Key sets the call's user key: the budget a Rate or Cost part with
// by: user charges. The default (and a key function that returns "") keys
// the request by its client IP, in a key space apart from user keys, so a
// user id never shares a budget with an address.
func Key(f func(*http.Request) string) Option {
	return func(c *config) { c.key = f }
}

// Describe fills in what a rule needs beyond the defaults, just before the
// check: the defaults are IP (the client IP key), User (from Key), Method
// (the URL path) and Bytes (Content-Length, 0 when unknown). Set Params
// for a cost part priced by param:<name> (a JSON object, e.g. built from a
// header or a decoded body), Topic or Subscribers for a predicate or a
// fan-out cost, or override any default. f runs for every request, on the
// request's goroutine, before the handler: keep it cheap, and if it reads
// the body, give the handler a fresh reader. The Call is the middleware's:
// do not keep it.
func Describe(f func(r *http.Request, c *message.Call)) Option {
	return func(c *config) { c.describe = f }
}

// TrustedProxies lists the proxies whose X-Forwarded-For is believed, as
// handshake.trustedProxies does for WebSocket upgrades (docs/configuration.md):
// behind them the client is the right-most entry that is not itself a
// trusted proxy. Without it the socket peer is the client and the header
// is never read.
func TrustedProxies(p ...netip.Prefix) Option {
	return func(c *config) { c.trusted = append([]netip.Prefix(nil), p...) }
}

// DropOn5xx reports a request whose handler answered with a 5xx status as
// message.Dropped rather than Completed, so an adaptive concurrency part
// reads backend failures as overload. It wraps the ResponseWriter to see the
// status (the wrapper has Unwrap and Flush, so http.ResponseController and
// streaming keep working).
func DropOn5xx() Option {
	return func(c *config) { c.dropOn5xx = true }
}

// ReleaseWhenClientGone gives the lease back as soon as the request's
// context ends (the client went away, or an outer timeout fired) rather
// than when the handler returns. Use it when handlers may keep running
// long after their client is gone and the class limits client-facing
// work; leave it off (the default) when the class limits the handler's own
// work, which goes on until it returns. It costs a context.AfterFunc, a few
// allocations, per admitted request.
func ReleaseWhenClientGone() Option {
	return func(c *config) { c.onGone = true }
}

// Middleware checks every request against c before calling the wrapped
// handler; a shed request is answered with 503 or 429 and never reaches
// it. It panics if c is nil.
func Middleware(c *message.Class, opts ...Option) func(http.Handler) http.Handler {
	if c == nil {
		panic("admithttp: Middleware needs a class")
	}
	m := &middleware{class: c, shed: newShedder(c.Name())}
	for _, o := range opts {
		o(&m.cfg)
	}
	m.pool.New = func() any {
		p := &pending{m: m}
		p.goneFn = p.gone
		return p
	}
	return func(next http.Handler) http.Handler {
		return &handler{m: m, next: next}
	}
}

type middleware struct {
	class *message.Class
	cfg   config
	shed  shedder
	pool  sync.Pool
}

type handler struct {
	m    *middleware
	next http.Handler
}

// pending is one admitted request's state, pooled.
type pending struct {
	call message.Call
	m    *middleware

	// state is the adapter's own exactly-once guard: the one that moves it
	// from held to released gives the lease back and reports the outcome.
	state    atomic.Uint32
	ctx      context.Context
	returned bool
	stop     func() bool // ReleaseWhenClientGone: context.AfterFunc's stop
	goneFn   func()      // p.gone, bound once per pooled state
	sw       statusWriter
}

const (
	held uint32 = iota
	released
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	p := m.pool.Get().(*pending)
	_, p.call.IP = clientip.FromRequest(r, m.cfg.trusted)
	if m.cfg.key != nil {
		p.call.User = m.cfg.key(r)
	}
	p.call.Method = r.URL.Path
	p.call.Bytes = max(r.ContentLength, 0)
	if m.cfg.describe != nil {
		m.cfg.describe(r, &p.call)
	}
	d := m.class.Check(&p.call)
	ctx := r.Context()
	admittrace.Record(ctx, m.class.Name(), d)
	if !d.Allowed {
		m.put(p)
		m.shed.write(w, d)
		return
	}
	p.ctx = ctx
	p.state.Store(held)
	if m.cfg.onGone && p.call.Holding() {
		p.stop = context.AfterFunc(ctx, p.goneFn)
	}
	defer p.finish()
	if m.cfg.dropOn5xx {
		p.sw.ResponseWriter, p.sw.status = w, 0
		w = &p.sw
	}
	h.next.ServeHTTP(w, r)
	p.returned = true
}

// finish runs when the handler returns or panics (a deferred call: the
// panic continues after it).
func (p *pending) finish() {
	o := message.Completed
	if !p.returned || p.ctx.Err() != nil || (p.m.cfg.dropOn5xx && p.sw.status >= 500) {
		o = message.Dropped
	}
	reuse := p.stop == nil || p.stop()
	p.release(o)
	if reuse {
		p.m.put(p)
	}
}

// gone is the ReleaseWhenClientGone callback.
func (p *pending) gone() { p.release(message.Dropped) }

func (p *pending) release(o message.Outcome) {
	if !p.state.CompareAndSwap(held, released) {
		return
	}
	p.call.ReleaseWith(o)
	if f := p.m.cfg.onReleased; f != nil {
		f(o)
	}
}

// put clears what would keep the request alive and pools the state.
func (m *middleware) put(p *pending) {
	p.call.User, p.call.IP, p.call.Method, p.call.Topic = "", "", "", ""
	p.call.Bytes, p.call.Subscribers, p.call.Params, p.call.ConnID = 0, 0, nil, 0
	p.ctx, p.returned, p.stop = nil, false, nil
	p.sw.ResponseWriter = nil
	m.pool.Put(p)
}
