package rtserver

import (
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/conf"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/publishrate"
	"github.com/rtserver/rtserver/rpcproxy"
	"github.com/rtserver/rtserver/server"
)

// Config is a node's whole configuration: the tree of
// docs/configuration.md, each section the Config of the package that uses
// it. Field order is the order of docs/configuration.md and of
// rtserver --print-config.
//
// The zero value runs: each package's zero values are its documented
// meaning (0 caps are off, 0 durations and sizes take their defaults). Use
// DefaultConfig for the defaults of docs/configuration.md. Validate (New
// calls it) reports every invalid key at once.
type Config struct {
	Listen      string              `yaml:"listen" help:"address of the HTTP listener serving /ws, /healthz, /readyz (and /metrics and the server API unless adminListen is set); empty: 127.0.0.1:8080"`
	AdminListen string              `yaml:"adminListen" help:"separate address for /metrics and the server API (/api/..., when api.key is set), kept off the clients' network; empty: both on the main listener"`
	HTTP        HTTPTimeouts        `yaml:"http"`
	Redis       bus.Config          `yaml:"redis"`
	Handshake   handshake.Config    `yaml:"handshake"`
	Auth        Auth                `yaml:"auth"`
	Topics      access.Config       `yaml:"topics"`
	History     history.Config      `yaml:"history"`
	Presence    presence.Config     `yaml:"presence"`
	Limits      server.Config       `yaml:"limits"`
	Pressure    pressure.Config     `yaml:"pressure"`
	PublishRate publishrate.Options `yaml:"publishRate"`
	Admission   message.Config      `yaml:"admission"`
	RPC         RPC                 `yaml:"rpc"`
	API         API                 `yaml:"api"`
	Drain       Drain               `yaml:"drain"`
	Metrics     MetricsConfig       `yaml:"metrics"`
	Log         Log                 `yaml:"log"`
}

// Deps are what a node uses beside its configuration: what YAML cannot
// say. The zero value works.
type Deps struct {
	// Registry receives every metric; nil: a new registry.
	Registry *prometheus.Registry
	// Logger receives the node's logs; nil: slog.Default().
	Logger *slog.Logger
	// TopicsProxyClient asks topics.proxy.url; nil: a client that follows
	// no redirects and keeps up to 64 idle connections to the backend.
	TopicsProxyClient *http.Client
	// TopicGrants are the application's own topic grants by name, usable
	// in every rule of Config.Topics next to the built-ins
	// (docs/access-control.md); a rule naming one that is missing stops
	// New.
	TopicGrants map[string]access.GrantFunc
	// AdmissionPredicates are the application's admission predicates by
	// class name: each joins the rule of that class in
	// Config.Admission.Classes (docs/embedding.md); one whose class is
	// missing stops New.
	AdmissionPredicates map[string]message.Predicate
	// JWTPublicKey is the PEM of auth.jwt's RSA or EC P-256 public key
	// held in memory (from a secret store); when set,
	// auth.jwt.publicKeyFile is not read.
	JWTPublicKey []byte
}

// Auth is connection authentication (auth.*).
type Auth struct {
	JWT JWT `yaml:"jwt"`
}

// JWT is how tokens are verified (the handshake checks them) and when a
// connection hears that its token is about to expire (the server tells
// it).
type JWT struct {
	handshake.JWT `yaml:",inline"`
	RefreshNotice time.Duration `yaml:"refreshNotice" help:"how long before its token's exp a connection gets the system tokenExpiring notice; unrefreshed, it is closed with 1008 at exp; 0 = 30s"`
}

// RPC is application RPC forwarding (rpc.*).
type RPC struct {
	// Proxy forwards methods with no Go handler to an HTTP backend; an
	// empty URL turns it off (-32601).
	Proxy rpcproxy.Config `yaml:"proxy"`
}

// API is the server API for backends (api.*, docs/server-api.md).
type API struct {
	// Key turns the server API on: callers present it as "Authorization:
	// apikey KEY". Served on AdminListen when set, else on Listen. Empty:
	// the API is off.
	Key string `yaml:"key" help:"API key backends send as \"Authorization: apikey KEY\" to POST /api/{publish,broadcast,disconnect,unsubscribe,info,presence,presenceStats}, served on adminListen when set, else on listen; printable ASCII without spaces; empty: the server API is off"`
}

// Drain is graceful shutdown (drain.*).
type Drain struct {
	Duration time.Duration `yaml:"duration" help:"connections are closed with 1012 spread over this window; 0 = all at once"`
}

// MetricsConfig is the Prometheus exposition (metrics.*).
type MetricsConfig struct {
	Namespace string `yaml:"namespace" help:"prefix for every metric name ([a-zA-Z_][a-zA-Z0-9_]*); empty: none"`
}

// Log is the process log of the standalone binary (log.*); a Node logs to
// Deps.Logger. NewLogger builds the logger it describes.
type Log struct {
	Format string `yaml:"format" help:"text | json; empty: text"`
	Level  string `yaml:"level" help:"debug | info | warn | error; empty: info"`
}

// NewLogger is a slog logger writing to w in l's format, at l's level.
func (l Log) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level)) // Validate checked it; "" is info
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// DefaultListen is the listen address when Config.Listen is empty.
const DefaultListen = "127.0.0.1:8080"

// DefaultConfig returns the defaults of docs/configuration.md.
func DefaultConfig() Config {
	return Config{
		Listen: DefaultListen,
		HTTP: HTTPTimeouts{
			ReadHeaderTimeout: DefaultReadHeaderTimeout,
			ReadTimeout:       DefaultReadTimeout,
			IdleTimeout:       DefaultIdleTimeout,
		},
		Redis:       bus.DefaultConfig(),
		Handshake:   handshake.DefaultConfig(),
		Auth:        Auth{JWT: JWT{RefreshNotice: 30 * time.Second}},
		Topics:      access.DefaultConfig(),
		History:     history.DefaultConfig(),
		Presence:    presence.DefaultConfig(),
		Limits:      server.DefaultConfig(),
		Pressure:    pressure.DefaultConfig(),
		PublishRate: publishrate.DefaultOptions(),
		RPC:         RPC{Proxy: rpcproxy.DefaultConfig()},
		Drain:       Drain{Duration: 10 * time.Second},
		Log:         Log{Format: "text", Level: "info"},
	}
}

// WithDefaults spells out defaults that an empty word stands for (a class
// rule's by, strategy and scope), so a printed configuration shows what is
// in effect.
func (c Config) WithDefaults() Config {
	c.Admission = c.Admission.WithDefaults()
	return c
}

var metricNamespaceRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Validate reports every invalid key at once (errors.Join of errors that
// name the key, *access.ConfigError); nil when c is valid. It reads
// auth.jwt.publicKeyFile to check that it holds a PEM block. It knows no
// application grant or predicate: New, which knows deps, checks the names
// of those too (ValidateWith).
func (c Config) Validate() error { return c.ValidateWith(Deps{}) }

// ValidateWith is Validate knowing what deps registers by name (topic
// grants, admission predicates) and holds (a JWT public key), as New
// checks c.
func (c Config) ValidateWith(deps Deps) error {
	var p conf.Problems
	hostPort := func(key, addr string) {
		if addr == "" {
			return
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			p.Add(key, "must be host:port, got %q", addr)
		}
	}
	hostPort("listen", c.Listen)
	hostPort("adminListen", c.AdminListen)
	p.NonNegativeDuration("http.readHeaderTimeout", c.HTTP.ReadHeaderTimeout)
	p.NonNegativeDuration("http.readTimeout", c.HTTP.ReadTimeout)
	p.NonNegativeDuration("http.idleTimeout", c.HTTP.IdleTimeout)
	p.Join(c.Redis.Validate())
	p.Join(c.Handshake.Validate())
	p.NonNegativeDuration("auth.jwt.refreshNotice", c.Auth.JWT.RefreshNotice)
	p.Join(c.Auth.JWT.ValidateWith(handshake.VerifierDeps{PublicKey: deps.JWTPublicKey}))
	p.Join(c.Topics.ValidateWith(access.Deps{Grants: deps.TopicGrants}))
	p.Join(c.History.Validate())
	p.Join(c.Presence.Validate())
	p.Join(c.Limits.Validate())
	p.Join(c.Pressure.Validate())
	p.Join(c.PublishRate.Validate())
	p.Join(c.Admission.ValidateWith(message.Deps{Predicates: deps.AdmissionPredicates}))
	if c.Redis.URL == "" {
		for _, name := range slices.Sorted(maps.Keys(c.Admission.Classes)) {
			r := c.Admission.Classes[name]
			if r.Rate != nil && r.Rate.Scope == "cluster" {
				p.Add("admission.classes."+name+".rate.scope", "cluster needs redis.url (the shared budget lives in Redis)")
			}
			if r.Cost != nil && r.Cost.Scope == "cluster" {
				p.Add("admission.classes."+name+".cost.scope", "cluster needs redis.url (the shared budget lives in Redis)")
			}
		}
	}
	p.Join(c.RPC.Proxy.Validate())
	if k := c.API.Key; k != "" && !headerToken(k) {
		p.Add("api.key", "must be printable ASCII without spaces (it travels in an HTTP header)")
	}
	p.NonNegativeDuration("drain.duration", c.Drain.Duration)
	if ns := c.Metrics.Namespace; ns != "" && !metricNamespaceRE.MatchString(ns) {
		p.Add("metrics.namespace", "must match [a-zA-Z_][a-zA-Z0-9_]*, got %q", ns)
	}
	switch c.Log.Format {
	case "", "text", "json":
	default:
		p.Add("log.format", "must be text or json, got %q", c.Log.Format)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		p.Add("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	return p.Err()
}

// headerToken reports whether s is printable ASCII without spaces.
func headerToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// ConfigError is one invalid key: Key is its path in
// docs/configuration.md, Source where the value came from when known.
type ConfigError = access.ConfigError
