package access

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/protocol"
)

// Action is what a client asks to do with a topic.
type Action uint8

const (
	Subscribe Action = iota
	Publish
)

// String is the action's wire name ("subscribe", "publish").
func (a Action) String() string {
	if a == Publish {
		return metrics.ActionPublish
	}
	return metrics.ActionSubscribe
}

// Question is one access check: who asks to do what with which topic.
type Question struct {
	Action Action
	Topic  string
	User   string                // JWT sub; "" for an anonymous connection
	Claim  *handshake.TopicClaim // the token's topics claim; nil when none
	ConnID uint64
	IP     netip.Addr // the client IP (trusted proxies applied)
}

// Decision is a Check's answer.
type Decision uint8

const (
	// Deny: no grant allowed the call (-32003 with data {"topic": T}).
	Deny Decision = iota
	// Allow: a grant allowed the call.
	Allow
	// Unavailable: no grant allowed the call and one of them could not
	// decide (the proxy failed under fail: closed, or an application
	// grant returned an error or panicked): -32005.
	Unavailable
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Unavailable:
		return "unavailable"
	}
	return "deny"
}

// GrantFunc is a grant an embedding application registers by name in
// Deps.Grants. It is called only when no grant listed before it allowed;
// ctx ends when the connection does. true allows; false lets the next
// grant decide; an error (or a panic) means it could not decide: the next
// grants are still tried, and when none allows the call answers -32005.
// It runs on the connection's read path: keep it fast, or cache.
type GrantFunc func(ctx context.Context, q Question) (bool, error)

// Built-in grant names.
const (
	GrantAny           = "any"
	GrantAuthenticated = "authenticated"
	GrantOwner         = "owner"
	GrantClaim         = "claim"
	GrantProxy         = "proxy"
)

var builtinGrants = []string{GrantAny, GrantAuthenticated, GrantOwner, GrantClaim, GrantProxy}

// anyRule is the default rule when Config.Default is nil.
var anyRule = Rule{Subscribe: []string{GrantAny}, Publish: []string{GrantAny}}

type grantKind uint8

const (
	kindAny grantKind = iota
	kindAuthenticated
	kindOwner
	kindClaim
	kindProxy
	kindFunc
)

type grant struct {
	kind grantKind
	name string    // for logs
	fn   GrantFunc // kindFunc only
}

// rule is a compiled Rule, indexed by Action.
type rule [2][]grant

type namespace struct {
	pat    pattern
	rule   rule
	keep   keeps
	hist   history.Policy     // (history.go)
	label  string             // the pattern as configured: the namespace label of topic_denied_namespace_total
	denied prometheus.Counter // topic_denied_namespace_total{namespace=label}
}

// keeps is what a rule's topics keep beside their grants.
type keeps struct{ presence, joinLeave bool }

// Checker answers access questions. Create it with New; it is safe for
// concurrent use.
type Checker struct {
	ns      []namespace
	def     rule
	defKeep keeps
	defHist history.Policy // (history.go)
	// keepHistory: some rule keeps history
	keepHistory bool
	keepAny     bool   // some rule keeps presence or joinLeave
	proxy       *proxy // nil unless a rule lists the proxy grant
	denied      [2]prometheus.Counter

	deniedDefault, deniedReserved prometheus.Counter
	log                           *slog.Logger
	anyPub                        bool
}

// New validates cfg (every problem at once, as *ConfigError values joined)
// and compiles it.
func New(cfg Config, deps Deps) (*Checker, error) {
	if err := cfg.validate(deps.Grants); err != nil {
		return nil, err
	}
	m, log := deps.Metrics, deps.Logger
	if m == nil {
		m = metrics.NewDiscard()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{log: log}
	c.denied[Subscribe] = m.TopicDenied.WithLabelValues(metrics.ActionSubscribe)
	c.denied[Publish] = m.TopicDenied.WithLabelValues(metrics.ActionPublish)
	c.deniedDefault = m.TopicDeniedNS.WithLabelValues(metrics.DeniedByDefault)
	c.deniedReserved = m.TopicDeniedNS.WithLabelValues(metrics.DeniedByReserved)
	usesProxy := false
	compile := func(r Rule) rule {
		var out rule
		for a, names := range [2][]string{r.Subscribe, r.Publish} {
			for _, name := range names {
				g := grant{name: name}
				switch name {
				case GrantAny:
					g.kind = kindAny
					if Action(a) == Publish {
						c.anyPub = true
					}
				case GrantAuthenticated:
					g.kind = kindAuthenticated
				case GrantOwner:
					g.kind = kindOwner
				case GrantClaim:
					g.kind = kindClaim
				case GrantProxy:
					g.kind = kindProxy
					usesProxy = true
				default:
					g.kind, g.fn = kindFunc, deps.Grants[name]
				}
				out[a] = append(out[a], g)
			}
		}
		return out
	}
	for i, n := range cfg.Namespaces {
		warnOmitted(log, fmt.Sprintf("topics.namespaces[%d]", i), n.Pattern, n.Rule)
		p, _ := compilePattern(n.Pattern) // validated above
		k := keeps{n.Presence, n.JoinLeave}
		c.ns = append(c.ns, namespace{pat: p, rule: compile(n.Rule), keep: k, hist: n.History,
			label: n.Pattern, denied: m.TopicDeniedNS.WithLabelValues(n.Pattern)})
		c.keepHistory = c.keepHistory || n.History.Enabled()
		c.keepAny = c.keepAny || k != keeps{}
	}
	def := anyRule
	if cfg.Default != nil {
		def = *cfg.Default
		warnOmitted(log, "topics.default", "", def)
	}
	c.def = compile(def)
	c.defKeep = keeps{def.Presence, def.JoinLeave}
	c.defHist = def.History
	c.keepHistory = c.keepHistory || def.History.Enabled()
	c.keepAny = c.keepAny || c.defKeep != keeps{}
	if usesProxy {
		c.proxy = newProxy(cfg.Proxy, deps, m, log)
	}
	return c, nil
}

// KeepsPresence reports whether some rule keeps presence or joinLeave.
func (c *Checker) KeepsPresence() bool { return c.keepAny }

// Presence reports what topic keeps: its presence, and join/leave diffs
// for its subscribers. The namespace that decides the topic's grants (by
// its shape, whoever asks) decides: a topic's presence is one for all its
// subscribers.
func (c *Checker) Presence(topic string) (presence, joinLeave bool) {
	if !c.keepAny || protocol.Reserved(topic) {
		return false, false
	}
	k := c.defKeep
	for i := range c.ns {
		if c.ns[i].pat.match(topic) {
			k = c.ns[i].keep
			break
		}
	}
	return k.presence, k.joinLeave
}

// PublishableByAny reports whether some rule lets anyone, anonymous
// connections included, publish: the start-up warning's condition when
// the server listens beyond loopback.
func (c *Checker) PublishableByAny() bool { return c.anyPub }

// Check answers q. A Deny is counted in topic_denied_total{action}.
// It is also counted in topic_denied_namespace_total by the rule that
// decided, and logged at debug level with that rule and the grants it
// tried: how an operator finds out why a call was refused.
func (c *Checker) Check(ctx context.Context, q Question) Decision {
	d, ns := c.decide(ctx, q)
	if d == Deny {
		c.denied[q.Action&1].Inc()
		c.deniedBy(ns, q)
	}
	return d
}

// Rule indices of decide beside the namespaces' own (0..len(ns)-1).
const (
	byDefault  = -1
	byReserved = -2
)

// deniedBy counts and logs a Deny decided by namespace ns (an index of
// c.ns, byDefault or byReserved).
func (c *Checker) deniedBy(ns int, q Question) {
	var grants []grant
	switch ns {
	case byReserved:
		c.deniedReserved.Inc()
		c.log.Debug("topic call refused: "+q.Action.String()+" in "+metrics.DeniedByReserved, "action", q.Action.String(), "topic", q.Topic, "user", q.User,
			"namespace", metrics.DeniedByReserved, "why", "topics starting with __ are reserved for the server")
		return
	case byDefault:
		c.deniedDefault.Inc()
		grants = c.def[q.Action&1]
	default:
		c.ns[ns].denied.Inc()
		grants = c.ns[ns].rule[q.Action&1]
	}
	if !c.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	names := make([]string, len(grants))
	for i, g := range grants {
		names[i] = g.name
	}
	label := metrics.DeniedByDefault
	if ns >= 0 {
		label = c.ns[ns].label
	}
	// The message names the action and namespace, both bounded by the
	// config, so the debug log's limit of one line per message and
	// interval keeps one of each kind of refusal instead of one in all.
	c.log.Debug("topic call refused: "+q.Action.String()+" in "+label, "action", q.Action.String(), "topic", q.Topic, "user", q.User,
		"namespace", label, "grants", names, "why", "no grant of the deciding rule allowed")
}

// decide answers q and says which rule decided: an index of c.ns,
// byDefault or byReserved.
func (c *Checker) decide(ctx context.Context, q Question) (Decision, int) {
	if protocol.Reserved(q.Topic) || q.Action > Publish {
		return Deny, byReserved
	}
	r, pat, by := &c.def, (*pattern)(nil), byDefault
	for i := range c.ns {
		if c.ns[i].pat.match(q.Topic) {
			r, pat, by = &c.ns[i].rule, &c.ns[i].pat, i
			break
		}
	}
	d := c.decideBy(ctx, q, r, pat)
	return d, by
}

func (c *Checker) decideBy(ctx context.Context, q Question, r *rule, pat *pattern) Decision {
	failed := false
	for _, g := range r[q.Action] {
		switch g.kind {
		case kindAny:
			return Allow
		case kindAuthenticated:
			if q.User != "" {
				return Allow
			}
		case kindOwner:
			// Only valid in a namespace whose pattern holds {user}.
			if pat.owns(q.Topic, q.User) {
				return Allow
			}
		case kindClaim:
			if claimAllows(q.Claim, q.Action, q.Topic) {
				return Allow
			}
		case kindProxy:
			switch c.proxy.ask(ctx, q) {
			case Allow:
				return Allow
			case Unavailable:
				failed = true
			}
		case kindFunc:
			ok, err := c.callGrant(ctx, g, q)
			if err != nil {
				failed = true
				c.log.Warn("topic grant failed", "grant", g.name, "action", q.Action.String(), "topic", q.Topic, "err", err)
			} else if ok {
				return Allow
			}
		}
	}
	if failed {
		return Unavailable
	}
	return Deny
}

// callGrant runs an application grant; a panic is its error.
func (c *Checker) callGrant(ctx context.Context, g grant, q Question) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, fmt.Errorf("panic: %v", p)
		}
	}()
	return g.fn(ctx, q)
}

// claimAllows reports whether the claim has a glob for a that matches
// topic. The globs were checked when the token was verified.
func claimAllows(claim *handshake.TopicClaim, a Action, topic string) bool {
	if claim == nil {
		return false
	}
	globs := claim.Subscribe
	if a == Publish {
		globs = claim.Publish
	}
	for _, g := range globs {
		if matchGlob(g, topic) {
			return true
		}
	}
	return false
}

// warnOmitted warns, once at start-up, about a rule that closes an action
// by leaving its list out: an omitted list allows no client, as an empty
// one does, but only the empty one says it was meant.
func warnOmitted(log *slog.Logger, key, pattern string, r Rule) {
	for _, a := range [...]struct {
		name  string
		grant []string
	}{{"subscribe", r.Subscribe}, {"publish", r.Publish}} {
		if a.grant == nil {
			log.Warn(key+" has no "+a.name+" list: no client may "+a.name+" on its topics (the server API still may); write "+a.name+": [] if that is meant, or list the grants (docs/access-control.md)",
				"key", key+"."+a.name, "pattern", pattern)
		}
	}
}
