package admitgrpc

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rtserver/rtserver/internal/clientip"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/internal/admittrace"
)

// Option configures the server interceptors.
type Option func(*config)

type config struct {
	key        func(context.Context) string
	describe   func(ctx context.Context, req any, c *message.Call)
	dropOn     uint32 // bit c set: a handler error with code c counts as Dropped
	trusted    []netip.Prefix
	onReleased func(message.Outcome) // tests: called by each admitted call's release
}

// Key sets the call's user key: the budget a Rate or Cost part with
// by: user charges (typically the authenticated subject, from ctx). The
// default, and a key function that returns "", keys the call by its client
// IP, in a key space apart from user keys.
func Key(f func(ctx context.Context) string) Option {
	return func(c *config) { c.key = f }
}

// Describe fills in what a rule needs beyond the defaults, just before the
// check: the defaults are IP (the client IP key), User (from Key), Method
// (the full method name) and Bytes (the request message's encoded size for
// a unary call, 0 for a stream). req is the request message of a unary
// call and nil for a stream (whose messages come later). Set Params for a
// cost part priced by param:<name> (a JSON object, e.g. {"maxTokens":700}
// from the request's fields), Topic for a predicate, or override any
// default. f runs on every call before the handler: keep it cheap. The
// Call is the interceptor's: do not keep it.
func Describe(f func(ctx context.Context, req any, c *message.Call)) Option {
	return func(c *config) { c.describe = f }
}

// DropOnCodes reports a call whose handler returned an error with one of
// these codes as message.Dropped rather than Completed, so an adaptive
// concurrency part reads backend failures as overload (the gRPC form of
// admithttp.DropOn5xx). Typical: codes.Unavailable, codes.DeadlineExceeded,
// codes.Internal. Application answers such as NotFound or InvalidArgument
// are completions: the backend did its work.
func DropOnCodes(cs ...codes.Code) Option {
	return func(c *config) {
		for _, code := range cs {
			if code < 32 {
				c.dropOn |= 1 << code
			}
		}
	}
}

// TrustedProxies lists the peers whose x-forwarded-for metadata is
// believed, by the rule of handshake.trustedProxies (docs/configuration.md):
// behind them the client is the right-most entry that is not itself a
// trusted proxy. Without it the peer is the client and the metadata is
// never read.
func TrustedProxies(p ...netip.Prefix) Option {
	return func(c *config) { c.trusted = append([]netip.Prefix(nil), p...) }
}

// UnaryServerInterceptor admits unary calls by their method's class; a
// method the router maps to no class runs unchecked.
func UnaryServerInterceptor(r *message.Router, opts ...Option) grpc.UnaryServerInterceptor {
	g := newGuard(r, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := g.router.ClassOf(info.FullMethod)
		if c == nil {
			return handler(ctx, req)
		}
		var size int64
		if m, ok := req.(proto.Message); ok {
			size = int64(proto.Size(m))
		}
		p, err := g.admit(ctx, c, info.FullMethod, req, size)
		if err != nil {
			return nil, err
		}
		defer p.finish()
		resp, err := handler(ctx, req)
		p.returned, p.err = true, err
		return resp, err
	}
}

// StreamServerInterceptor admits streams by their method's class; the
// lease, if any, is held until the stream ends.
func StreamServerInterceptor(r *message.Router, opts ...Option) grpc.StreamServerInterceptor {
	g := newGuard(r, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c := g.router.ClassOf(info.FullMethod)
		if c == nil {
			return handler(srv, ss)
		}
		p, err := g.admit(ss.Context(), c, info.FullMethod, nil, 0)
		if err != nil {
			return err
		}
		defer p.finish()
		err = handler(srv, ss)
		p.returned, p.err = true, err
		return err
	}
}

type guard struct {
	router *message.Router
	cfg    config
	pool   sync.Pool
	keys   keyCache
}

func newGuard(r *message.Router, opts []Option) *guard {
	if r == nil {
		panic("admitgrpc: interceptor needs a router")
	}
	g := &guard{router: r}
	for _, o := range opts {
		o(&g.cfg)
	}
	g.pool.New = func() any { return &pending{g: g} }
	return g
}

// pending is one admitted call's state, pooled.
type pending struct {
	call     message.Call
	g        *guard
	ctx      context.Context
	returned bool
	err      error // the handler's
}

// admit checks the call and returns its state, or the shed status.
func (g *guard) admit(ctx context.Context, c *message.Class, method string, req any, size int64) (*pending, error) {
	p := g.pool.Get().(*pending)
	p.call.Method = method
	p.call.IP = g.clientKey(ctx)
	if g.cfg.key != nil {
		p.call.User = g.cfg.key(ctx)
	}
	p.call.Bytes = size
	if g.cfg.describe != nil {
		g.cfg.describe(ctx, req, &p.call)
	}
	d := c.Check(&p.call)
	admittrace.Record(ctx, c.Name(), d)
	if !d.Allowed {
		g.put(p)
		return nil, shedError(c.Name(), d)
	}
	p.ctx = ctx
	return p, nil
}

// finish is deferred around the handler: it runs on return and on panic
// (the panic goes on after it), exactly once per admitted call.
func (p *pending) finish() {
	o := message.Completed
	if !p.returned || p.ctx.Err() != nil || p.dropErr() {
		o = message.Dropped
	}
	p.call.ReleaseWith(o)
	if f := p.g.cfg.onReleased; f != nil {
		f(o)
	}
	p.g.put(p)
}

// dropErr reports whether the handler's error has a DropOnCodes code.
func (p *pending) dropErr() bool {
	if p.err == nil || p.g.cfg.dropOn == 0 {
		return false
	}
	code := status.Code(p.err)
	return code < 32 && p.g.cfg.dropOn&(1<<code) != 0
}

func (g *guard) put(p *pending) {
	p.call.Method, p.call.IP, p.call.User, p.call.Topic = "", "", "", ""
	p.call.Bytes, p.call.Subscribers, p.call.Params, p.call.ConnID = 0, 0, nil, 0
	p.ctx, p.returned, p.err = nil, false, nil
	g.pool.Put(p)
}

// clientKey is the peer's IP key, or behind a trusted proxy the forwarded
// client's; "" when the transport knows no peer.
func (g *guard) clientKey(ctx context.Context) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return ""
	}
	if len(g.cfg.trusted) == 0 {
		if a, ok := pr.Addr.(*net.TCPAddr); ok {
			// The common case without formatting and re-parsing the
			// address: the same key as Resolve gives.
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				return g.keys.key(ip.Unmap())
			}
		}
	}
	var xff []string
	if len(g.cfg.trusted) > 0 {
		xff = metadata.ValueFromIncomingContext(ctx, "x-forwarded-for")
	}
	_, key := clientip.Resolve(pr.Addr.String(), xff, g.cfg.trusted)
	return key
}

// keyCacheSlots is how many peers' IP keys a guard remembers.
const keyCacheSlots = 256

// keyCache remembers the IP key text of recent peers, so that a call from
// a peer seen before formats no string (the one allocation an admitted
// call made): gRPC clients keep their connections, so the same peers call
// again and again. Direct-mapped and bounded (keyCacheSlots entries, ~2 KiB
// of pointers per interceptor): a slot is an atomic pointer to an
// immutable entry, so a lookup is one load and a compare, with no lock; a
// miss formats the key as before and replaces the slot (one more small
// allocation, the entry). Peers that collide in a slot just miss.
type keyCache [keyCacheSlots]atomic.Pointer[keyEntry]

type keyEntry struct {
	ip  netip.Addr
	key string
}

// key is clientip.Key(ip), from the cache when ip was seen recently.
func (kc *keyCache) key(ip netip.Addr) string {
	b := ip.As16()
	h := (binary.LittleEndian.Uint64(b[:8]) ^ binary.LittleEndian.Uint64(b[8:])) * 0x9e3779b97f4a7c15
	slot := &kc[h>>56] // the top 8 bits: keyCacheSlots == 256
	if e := slot.Load(); e != nil && e.ip == ip {
		return e.key
	}
	k := clientip.Key(ip)
	slot.Store(&keyEntry{ip: ip, key: k})
	return k
}
