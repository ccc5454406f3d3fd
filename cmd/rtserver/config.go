package main

// Configuration of the standalone binary (docs/configuration.md, generated from this file).
//
// The Config struct tree is the single definition: its yaml tags are the
// key names, its help tags are the one-line descriptions, and reflection
// over it derives the environment variable names, the strict file decoder
// and docs/configuration.md. Adding a key is adding a field with both tags
// (and its default in Default); everything else follows.

//go:generate go test -run ^TestConfigReferenceUpToDate$ . -update-config-reference

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration. Field order is the order of
// docs/configuration.md and of --print-config.
type Config struct {
	Listen      string            `yaml:"listen" help:"address of the HTTP listener serving /ws, /healthz, /readyz (and /metrics unless adminListen is set)"`
	AdminListen string            `yaml:"adminListen" help:"separate address for /metrics; empty: /metrics on the main listener"`
	HTTP        HTTPConfig        `yaml:"http"`
	Redis       RedisConfig       `yaml:"redis"`
	Handshake   HandshakeConfig   `yaml:"handshake"`
	Auth        AuthConfig        `yaml:"auth"`
	Topics      TopicsConfig      `yaml:"topics"`
	Limits      LimitsConfig      `yaml:"limits"`
	Pressure    PressureConfig    `yaml:"pressure"`
	PublishRate PublishRateConfig `yaml:"publishRate"`
	Admission   AdmissionConfig   `yaml:"admission"`
	RPC         RPCConfig         `yaml:"rpc"`
	API         APIConfig         `yaml:"api"`
	Drain       DrainConfig       `yaml:"drain"`
	Metrics     MetricsConfig     `yaml:"metrics"`
	Log         LogConfig         `yaml:"log"`
}

// HTTPConfig bounds how long the HTTP listeners (main and admin) wait on
// a client; an upgraded WebSocket is not affected (pings watch it).
type HTTPConfig struct {
	ReadHeaderTimeout Duration `yaml:"readHeaderTimeout" help:"longest time to read a request's head (positive)"`
	ReadTimeout       Duration `yaml:"readTimeout" help:"longest time to read a whole request, body included (positive)"`
	IdleTimeout       Duration `yaml:"idleTimeout" help:"a keep-alive connection with no next request within this is closed; keep it above your load balancer's idle timeout (positive)"`
}

// RedisConfig is the cross-instance bus.
type RedisConfig struct {
	URL           string `yaml:"url" help:"redis:// or rediss:// URL; empty: single instance with the in-memory bus"`
	Bus           string `yaml:"bus" help:"single (one channel) | sharded (SSUBSCRIBE, Redis 7+, Redis Cluster)"`
	Partitions    int    `yaml:"partitions" help:"sharded bus: topics are hashed into this many channels (at least 1)"`
	ChannelPrefix string `yaml:"channelPrefix" help:"prefix of every Redis channel, for multi-tenant isolation (not empty)"`
}

// HandshakeConfig is the handshake tier (docs/handshake.md).
type HandshakeConfig struct {
	MaxConnections int         `yaml:"maxConnections" help:"open WebSocket connections on this instance; 0 = no cap"`
	MaxConcurrent  int         `yaml:"maxConcurrent" help:"upgrades in flight, from arrival to the end of the handshake; 0 = no cap"`
	PerTickBudget  int         `yaml:"perTickBudget" help:"upgrades completed per tick; 0 = no pacing"`
	Tick           Duration    `yaml:"tick" help:"pacing period; must be positive when perTickBudget > 0"`
	MaxQueueWait   Duration    `yaml:"maxQueueWait" help:"longest a paced upgrade waits in the FIFO queue before it is rejected; 0 = reject the excess at once"`
	Reject         string      `yaml:"reject" help:"how a shed upgrade is answered: http (503/429 with Retry-After) | close (upgrade, then close 1013)"`
	RetryAfter     Duration    `yaml:"retryAfter" help:"base of the jittered retry hint given to rejected clients (positive)"`
	PerIP          PerIPConfig `yaml:"perIP"`
	TrustedProxies []string    `yaml:"trustedProxies" help:"CIDRs of proxies whose X-Forwarded-For is believed"`
	AllowedOrigins []string    `yaml:"allowedOrigins" help:"Origin glob patterns (path.Match syntax); empty: same host only"`
	AllowNoOrigin  bool        `yaml:"allowNoOrigin" help:"admit upgrades that carry no Origin header (non-browser clients)"`
}

// PerIPConfig is the per-client-IP upgrade rate.
type PerIPConfig struct {
	Limit int      `yaml:"limit" help:"upgrades per client IP (IPv6: per /64) per period; 0 = off"`
	Per   Duration `yaml:"per" help:"the period of handshake.perIP.limit; must be positive when the limit is set"`
}

// AuthConfig is connection authentication.
type AuthConfig struct {
	JWT JWTConfig `yaml:"jwt"`
}

// JWTConfig selects how tokens are verified; hmacSecret, publicKeyFile
// and jwksUrl all empty: anonymous connections. At most one of them may
// be set.
type JWTConfig struct {
	HMACSecret    string   `yaml:"hmacSecret" help:"HS256 key (the raw bytes of this string); empty with no publicKeyFile or jwksUrl: anonymous connections"`
	PublicKeyFile string   `yaml:"publicKeyFile" help:"PEM file with the RSA or EC public key for RS256 / ES256 tokens; read at start-up"`
	JWKSURL       string   `yaml:"jwksUrl" help:"http(s) URL of a JSON Web Key Set: RS256 / ES256 keys picked by the token's kid; fetched at start-up (failure stops it), cached, fetched again when an unknown kid arrives or the set is an hour old, at most once per 30s"`
	Audience      string   `yaml:"audience" help:"when set, a token's aud must contain it, else 401"`
	Issuer        string   `yaml:"issuer" help:"when set, a token's iss must equal it, else 401"`
	RefreshNotice Duration `yaml:"refreshNotice" help:"how long before its token's exp a connection gets the system tokenExpiring notice (positive); unrefreshed, it is closed with 1008 at exp"`
}

// TopicsConfig is the topic grants (docs/access-control.md).
type TopicsConfig struct {
	Namespaces []NamespaceConfig `yaml:"namespaces" help:"ordered list of {pattern, subscribe, publish}; the first whose pattern matches the topic decides (see Topic namespaces); default: none"`
	Default    TopicRule         `yaml:"default"`
	Proxy      TopicProxyConfig  `yaml:"proxy"`
}

// NamespaceConfig is one entry of topics.namespaces.
type NamespaceConfig struct {
	Pattern   string   `yaml:"pattern" help:"path.Match glob of topics ('*' stops at '/'); may hold {user} once (between literal characters or the ends): the namespace then decides every topic of its shape, {user} read as one or more characters but '/', whoever asks"`
	Subscribe []string `yaml:"subscribe" help:"grants, any of which lets a client subscribe: any, authenticated, owner (pattern holds {user}; the user whose id is the topic's part in its place), claim (the token's topics claim), proxy (ask topics.proxy.url); empty: nobody"`
	Publish   []string `yaml:"publish" help:"grants, any of which lets a client publish (same words); empty: nobody (the server API still may)"`
}

// TopicRule is the grants of topics that no namespace matches.
type TopicRule struct {
	Subscribe []string `yaml:"subscribe" help:"grants for subscribing to topics no namespace matches: any, authenticated, claim, proxy; empty: nobody"`
	Publish   []string `yaml:"publish" help:"grants for publishing on topics no namespace matches (same words); empty: nobody"`
}

// TopicProxyConfig is the backend of the proxy grant.
type TopicProxyConfig struct {
	URL      string   `yaml:"url" help:"http(s) URL that receives each proxy-granted question as a JSON POST {action, topic, user, connId, clientIp} and answers 200 {\"allow\": bool}; required when a rule lists proxy"`
	Timeout  Duration `yaml:"timeout" help:"longest wait for the backend's answer; past it topics.proxy.fail decides (positive)"`
	CacheTTL Duration `yaml:"cacheTTL" help:"reuse a publish answer for an authenticated user per (user, topic) this long; 0 = ask every time"`
	Fail     string   `yaml:"fail" help:"what a failed or timed-out question decides: open (allow) | closed (-32005)"`
}

// LimitsConfig bounds each connection.
type LimitsConfig struct {
	MaxMessageBytes         int64    `yaml:"maxMessageBytes" help:"largest client message; a larger one closes the connection with 1009 (positive)"`
	MaxSubscriptionsPerConn int      `yaml:"maxSubscriptionsPerConn" help:"topics one connection may subscribe to; past it: -32004 LIMIT_EXCEEDED (positive)"`
	SendQueueBytes          int64    `yaml:"sendQueueBytes" help:"bytes queued in the server for one client that its socket would not take (the client is not reading); past this while the socket is full: close 1013 (positive)"`
	WriteTimeout            Duration `yaml:"writeTimeout" help:"longest one socket write may take (positive)"`
	PingInterval            Duration `yaml:"pingInterval" help:"period of WebSocket pings that detect dead peers (positive)"`
	MaxJSONDepth            int      `yaml:"maxJSONDepth" help:"how deeply JSON may nest in a client message or a server API body; deeper: -32600 (client) or 400 (API), never forwarded (positive)"`
}

// PressureConfig is the local pressure monitor. Thresholds of 0 switch
// their reason off.
type PressureConfig struct {
	SampleInterval          Duration `yaml:"sampleInterval" help:"period of the pressure samples (positive)"`
	MemoryHeapUsedRatio     float64  `yaml:"memoryHeapUsedRatio" help:"MEMORY when heap in use / memory limit (GOMEMLIMIT or memoryLimitBytes) reaches this; in (0, 1], 0 = off"`
	MemoryLimitBytes        int64    `yaml:"memoryLimitBytes" help:"memory limit used when GOMEMLIMIT is unset; 0: the cgroup limit"`
	PublishRatePerSec       float64  `yaml:"publishRatePerSec" help:"PUBLISH_RATE when messages published per second reach this; 0 = off"`
	SubscriberRatio         float64  `yaml:"subscriberRatio" help:"SUBSCRIBERS when subscriptions / connections reach this; 0 = off"`
	TopicPublishRatePerSec  float64  `yaml:"topicPublishRatePerSec" help:"a topic is hot at this many publish attempts per second; 0 = off"`
	TopicPublishBytesPerSec float64  `yaml:"topicPublishBytesPerSec" help:"a topic is hot at this many published bytes per second; 0 = off"`
	TopN                    int      `yaml:"topN" help:"top publishing topics and users kept per sample (at least 1)"`
}

// PublishRateConfig is the cluster aggregator, active when redis.url is set.
type PublishRateConfig struct {
	Channel         string   `yaml:"channel" help:"Redis channel of the rate envelopes (not empty)"`
	PublishInterval Duration `yaml:"publishInterval" help:"period of this instance's envelope (positive)"`
	StaleAfter      Duration `yaml:"staleAfter" help:"a sibling's slice is dropped when nothing newer arrived within this; at least publishInterval"`
	TopN            int      `yaml:"topN" help:"topics and users carried per envelope (at least 1)"`
	MaxClockSkew    Duration `yaml:"maxClockSkew" help:"how far apart the instances' clocks may be: an envelope whose ts is further than staleAfter + this from the receiver's clock is dropped, as is a replayed one (positive)"`
	HMACSecret      string   `yaml:"hmacSecret" help:"when set, rate envelopes and bus messages are signed (HMAC-SHA256) and unsigned or badly signed ones are dropped; the same on every instance"`
}

// AdmissionConfig is the message tier: class rules and the method routing.
// A map given in a file or environment variable replaces the default (empty)
// map; maps are never merged.
type AdmissionConfig struct {
	Classes    map[string]ClassRule `yaml:"classes" help:"class name -> rule (see Class rules); default: none"`
	Methods    map[string]string    `yaml:"methods" help:"method name or path.Match glob -> class; exact names win over globs; unmatched methods are admitted; default: none"`
	FailPolicy string               `yaml:"failPolicy" help:"what a rule that errors or panics decides: open | closed"`
}

// ClassRule is one class's rule. A call must clear every part that is set,
// and at least one part must be set.
type ClassRule struct {
	Reasons             []string                 `yaml:"reasons,omitempty" help:"shed while the local pressure reason is one of these: MEMORY, PUBLISH_RATE, SUBSCRIBERS"`
	ClusterTopPublisher *ClusterTopPublisherRule `yaml:"clusterTopPublisher,omitempty"`
	Rate                *RateRule                `yaml:"rate,omitempty"`
	Cost                *CostRule                `yaml:"cost,omitempty"`
	Concurrency         *ConcurrencyRule         `yaml:"concurrency,omitempty"`
	AdaptiveConcurrency *AdaptiveConcurrencyRule `yaml:"adaptiveConcurrency,omitempty"`
}

// ClusterTopPublisherRule sheds while the topic's (or user's) cluster-wide
// publish rate is >= Threshold.
type ClusterTopPublisherRule struct {
	Threshold float64 `yaml:"threshold" help:"publish attempts per second, this instance plus every sibling's fresh slice, at which calls are shed (positive)"`
	By        string  `yaml:"by" help:"topic | user; empty: topic"`
}

// RateRule limits calls per key.
type RateRule struct {
	Limit    int      `yaml:"limit" help:"calls allowed per period and key (positive)"`
	Per      Duration `yaml:"per" help:"the period (positive)"`
	By       string   `yaml:"by" help:"user | conn | ip; an anonymous connection's user key is its client IP; empty: user"`
	Strategy string   `yaml:"strategy" help:"gcra (a token bucket: a full burst, then one call per per/limit) | slidingWindow (the true count: at most limit calls in any window of per; memory up to limit timestamps per key); empty: gcra"`
	Scope    string   `yaml:"scope" help:"local (each instance counts its own calls) | cluster (one budget shared by every instance through Redis: needs redis.url, strategy gcra, by user or ip; one round trip per check; a Redis failure is decided by admission.failPolicy and counted in admission_rule_errors_total); empty: local"`
}

// CostRule charges each call's cost against a per-key budget.
type CostRule struct {
	Budget int64    `yaml:"budget" help:"cost units allowed per period and key: a token bucket of this size, refilled evenly over per (1 to 2147483647)"`
	Per    Duration `yaml:"per" help:"the period (positive)"`
	Of     string   `yaml:"of" help:"what a call costs: bytes (the request frame) | fanout (the request's bytes x this instance's subscribers of the topic, for publish) | param:NAME (the call's top-level numeric param NAME, e.g. param:maxTokens, rounded up; a call without it is decided by admission.failPolicy); denied calls answer -32002 with reason COST"`
	By     string   `yaml:"by" help:"user | conn | ip, as for rate; empty: user"`
	Scope  string   `yaml:"scope" help:"local | cluster, as for rate; a class whose rate and cost are both cluster-scoped checks both in one round trip and needs the same by for both; empty: local"`
}

// ConcurrencyRule caps in-flight calls of the class.
type ConcurrencyRule struct {
	Max int `yaml:"max" help:"calls of this class in flight at once on this instance (positive)"`
}

// AdaptiveConcurrencyRule caps in-flight calls at a limit that follows the
// calls' latency (docs/admission.md).
type AdaptiveConcurrencyRule struct {
	Min int `yaml:"min" help:"lowest in-flight limit, and the limit while the no-load latency is probed (positive)"`
	Max int `yaml:"max" help:"highest in-flight limit (at least min); the limit starts at min and moves with the calls' latency and drops (reason CONCURRENCY; gauge admission_concurrency_limit)"`
}

// RPCConfig is application RPC forwarding.
type RPCConfig struct {
	Proxy ProxyConfig `yaml:"proxy"`
}

// ProxyConfig is the HTTP RPC backend.
type ProxyConfig struct {
	URL     string   `yaml:"url" help:"http(s) URL that receives each application RPC as a JSON-RPC POST and answers with the JSON-RPC response; empty: unknown methods answer -32601"`
	Timeout Duration `yaml:"timeout" help:"longest wait for the backend; past it the call answers -32005 (positive)"`
}

// APIConfig is the server API for backends (docs/server-api.md).
type APIConfig struct {
	Key string `yaml:"key" help:"API key backends send as \"Authorization: apikey KEY\" to POST /api/{publish,broadcast,disconnect,unsubscribe,info}, served on adminListen when set, else on listen; printable ASCII without spaces; empty: the server API is off"`
}

// DrainConfig is graceful shutdown.
type DrainConfig struct {
	Duration Duration `yaml:"duration" help:"connections are closed with 1012 spread over this window; 0 = all at once"`
}

// MetricsConfig is the Prometheus exposition.
type MetricsConfig struct {
	Namespace string `yaml:"namespace" help:"prefix for every metric name ([a-zA-Z_][a-zA-Z0-9_]*); empty: none"`
}

// LogConfig is the process log (log/slog). Not part of the other keys: it configures
// only the standalone binary.
type LogConfig struct {
	Format string `yaml:"format" help:"text | json (rtserver addition)"`
	Level  string `yaml:"level" help:"debug | info | warn | error (rtserver addition)"`
}

// Default is the documented defaults (docs/configuration.md), log text/info included.
// admission.classes and admission.methods are empty (nil).
func Default() Config {
	return Config{
		Listen:      "127.0.0.1:8080",
		AdminListen: "",
		HTTP: HTTPConfig{
			ReadHeaderTimeout: Duration(10 * time.Second),
			ReadTimeout:       Duration(30 * time.Second),
			IdleTimeout:       Duration(120 * time.Second),
		},
		Redis: RedisConfig{
			URL:           "",
			Bus:           "single",
			Partitions:    16,
			ChannelPrefix: "rt:",
		},
		Handshake: HandshakeConfig{
			MaxConnections: 0,
			MaxConcurrent:  1000,
			PerTickBudget:  64,
			Tick:           Duration(10 * time.Millisecond),
			MaxQueueWait:   Duration(2 * time.Second),
			Reject:         "http",
			RetryAfter:     Duration(time.Second),
			PerIP:          PerIPConfig{Limit: 0, Per: Duration(10 * time.Second)},
			AllowNoOrigin:  true,
		},
		Auth: AuthConfig{JWT: JWTConfig{RefreshNotice: Duration(30 * time.Second)}},
		Topics: TopicsConfig{
			Default: TopicRule{Subscribe: []string{"any"}, Publish: []string{"any"}},
			Proxy:   TopicProxyConfig{Timeout: Duration(time.Second), Fail: "closed"},
		},
		Limits: LimitsConfig{
			MaxMessageBytes:         65536,
			MaxSubscriptionsPerConn: 128,
			SendQueueBytes:          1048576,
			WriteTimeout:            Duration(5 * time.Second),
			PingInterval:            Duration(25 * time.Second),
			MaxJSONDepth:            64,
		},
		Pressure: PressureConfig{
			SampleInterval:          Duration(time.Second),
			MemoryHeapUsedRatio:     0.85,
			MemoryLimitBytes:        0,
			PublishRatePerSec:       10000,
			SubscriberRatio:         50,
			TopicPublishRatePerSec:  5000,
			TopicPublishBytesPerSec: 10485760,
			TopN:                    20,
		},
		PublishRate: PublishRateConfig{
			Channel:         "rt:pressure:rates",
			PublishInterval: Duration(5 * time.Second),
			StaleAfter:      Duration(12 * time.Second),
			TopN:            20,
			MaxClockSkew:    Duration(5 * time.Second),
		},
		Admission: AdmissionConfig{FailPolicy: "open"},
		RPC:       RPCConfig{Proxy: ProxyConfig{Timeout: Duration(5 * time.Second)}},
		Drain:     DrainConfig{Duration: Duration(10 * time.Second)},
		Log:       LogConfig{Format: "text", Level: "info"},
	}
}

// Duration is a time.Duration written as a Go duration string ("10ms",
// "2s", "1m30s") in YAML and environment variables. Convert with
// time.Duration(d).
type Duration time.Duration

// String is the Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a Go duration string. A bare number other than 0 is
// refused: "10" would be ambiguous.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a Go duration such as 10ms or 2s")
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("want a Go duration such as 10ms or 2s, got %q", s)
	}
	return Duration(v), nil
}

// Action is what the binary should do once the configuration is loaded.
type Action int

const (
	ActionRun            Action = iota // serve
	ActionPrintConfig                  // --print-config: write cfg.YAML() to stdout, exit 0
	ActionPrintReference               // --config-reference: write ConfigReference() to stdout, exit 0
)

// KeyError is an invalid or unknown configuration key. Every error Load
// and Validate return is a KeyError or an errors.Join of them, so the
// operator sees each offending key at once.
type KeyError struct {
	Key    string // key path such as handshake.tick; an unknown RTSERVER_* name; "flags"; "--config"; the file name for YAML syntax errors
	Msg    string // what is wrong
	Source string // where the value came from: "FILE:LINE" or "RTSERVER_X"; "" for the merged result
}

func (e *KeyError) Error() string {
	if e.Source == "" {
		return "config: " + e.Key + ": " + e.Msg
	}
	return "config: " + e.Key + ": " + e.Msg + " (" + e.Source + ")"
}
