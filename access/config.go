package access

import (
	"fmt"
	"github.com/rtserver/rtserver/metrics"
	"log/slog"
	"net/http"
	"time"

	"github.com/rtserver/rtserver/history"
)

// Rule lists the grants of each action; any of them allows, an empty list
// allows nobody.
type Rule struct {
	Subscribe []string `yaml:"subscribe" help:"grants, any of which lets a client subscribe: any, authenticated, owner (in a namespace whose pattern holds {user}: the user whose id is the topic's part in its place), claim (the token's topics claim), proxy (ask topics.proxy.url); empty: nobody"`
	Publish   []string `yaml:"publish" help:"grants, any of which lets a client publish (same words); empty: nobody (the server API still may)"`
	// Presence keeps who is subscribed to the topics, fleet-wide
	// (docs/presence.md); JoinLeave sends their subscribers coalesced
	// join/leave diffs. Both are decided by the topic's shape, whoever
	// asks (Checker.Presence).
	Presence  bool `yaml:"presence" help:"keep the topics' presence: who is subscribed, fleet-wide (methods presence and presenceStats, docs/presence.md)"`
	JoinLeave bool `yaml:"joinLeave" help:"send the topics' subscribers coalesced presence notifications of joins and leaves, at most one per presence.diffInterval"`
	// History keeps the topics' recent messages for recovery
	// (docs/history.md), decided by the topic's shape like presence; the
	// zero value keeps none.
	History history.Policy `yaml:"history" help:"keep the topics' recent messages for recovery, {size, ttl}: the last size messages, each for ttl (docs/history.md); default {0, 0s}: none"`
}

// Namespace is a set of topics (Pattern) and its grants.
type Namespace struct {
	// Pattern is a path.Match glob ('*' matches any run of characters but
	// '/') holding at most one "{user}". A {user} pattern decides every
	// topic of its shape ({user} read as one or more characters but '/'),
	// whoever asks; its owner grant allows only the user whose id is the
	// topic's run in {user}'s place (docs/access-control.md).
	Pattern string `yaml:"pattern" help:"path.Match glob of topics ('*' stops at '/'); may hold {user} once (between literal characters or the ends): the namespace then decides every topic of its shape, {user} read as one or more characters but '/', whoever asks"`
	Rule    `yaml:",inline"`
}

// Config is the topic grants (the topics.* keys). The zero value lets
// everyone subscribe to and publish on every topic not reserved for the
// server, as the standalone binary's default does.
type Config struct {
	// Namespaces are tried in order; the first whose pattern matches the
	// topic decides.
	Namespaces []Namespace `yaml:"namespaces" help:"ordered list of {pattern, subscribe, publish, presence, joinLeave, history}; the first whose pattern matches the topic decides (see Topic namespaces); default: none"`
	// Default decides topics no namespace matches; nil means
	// {Subscribe: [any], Publish: [any]}.
	Default *Rule `yaml:"default"`
	Proxy   Proxy `yaml:"proxy"`
}

// Deps are what a Checker uses beside its configuration.
type Deps struct {
	Metrics *metrics.Metrics // nil: metrics.NewDiscard()
	Logger  *slog.Logger     // nil: discard
	// ProxyClient asks topics.proxy.url; nil = a client that follows no
	// redirects and keeps up to 64 idle connections to the backend.
	ProxyClient *http.Client
	// Grants are the application's own grants by name, usable in every
	// rule next to the built-ins. A name may not shadow a built-in, and a
	// rule naming a grant that is neither stops New.
	Grants map[string]GrantFunc

	now func() time.Time // the proxy answers' cache clock; nil = time.Now
}

// DefaultConfig is the topics.* defaults of docs/configuration.md.
func DefaultConfig() Config {
	return Config{
		Default: &Rule{Subscribe: []string{GrantAny}, Publish: []string{GrantAny}},
		Proxy:   Proxy{Timeout: time.Second},
	}
}

// FailPolicy decides a proxy question that failed or timed out.
type FailPolicy int

const (
	FailClosed FailPolicy = iota // deny with -32005 (the default)
	FailOpen                     // allow
)

// MarshalText is the config word: open or closed.
func (f FailPolicy) MarshalText() ([]byte, error) {
	switch f {
	case FailClosed:
		return []byte("closed"), nil
	case FailOpen:
		return []byte("open"), nil
	}
	return nil, fmt.Errorf("unknown fail policy %d", int(f))
}

// UnmarshalText reads open or closed.
func (f *FailPolicy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "closed":
		*f = FailClosed
	case "open":
		*f = FailOpen
	default:
		return fmt.Errorf("want open or closed")
	}
	return nil
}

// Proxy is the proxy grant's backend (topics.proxy.*).
//
// The question is POSTed as JSON,
// {"action":"subscribe"|"publish","topic":T,"user":U,"connId":C,"clientIp":IP},
// and the backend answers 200 with {"allow": true|false}. Any other
// status, a body that is not that JSON, a timeout or a transport error is
// a failure: counted in topic_proxy_errors_total{reason} and decided by
// Fail.
type Proxy struct {
	URL string `yaml:"url" help:"http(s) URL that receives each proxy-granted question as a JSON POST {action, topic, user, connId, clientIp} and answers 200 {\"allow\": bool}; required when a rule lists proxy"`
	// Timeout is the longest wait per question; required (> 0) when URL
	// is set.
	Timeout time.Duration `yaml:"timeout" help:"longest wait for the backend's answer; past it topics.proxy.fail decides (positive when url is set)"`
	// CacheTTL > 0 keeps publish answers for authenticated users per
	// (user, topic) that long. Subscribe answers and anonymous
	// connections' answers are never cached (the backend may decide by
	// connection or client IP).
	CacheTTL time.Duration `yaml:"cacheTTL" help:"reuse a publish answer for an authenticated user per (user, topic) this long; 0 = ask every time"`
	Fail     FailPolicy    `yaml:"fail" help:"what a failed or timed-out question decides: open (allow) | closed (-32005)"`
}

// proxyCacheSize is the most answers the proxy grant keeps (CacheTTL).
const proxyCacheSize = 65536
