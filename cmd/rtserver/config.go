package main

// Configuration of the standalone binary (CONTRACT.md section 5).
//
// The Config struct tree is the single definition: its yaml tags are the
// key names, its help tags are the one-line descriptions, and reflection
// over it derives the environment variable names, the strict file decoder
// and docs/configuration.md. Adding a key is adding a field with both tags
// (and its default in Default); everything else follows.

//go:generate go test -run ^TestConfigReferenceUpToDate$ . -update-config-reference

import (
	"bytes"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Config is the whole configuration. Field order follows CONTRACT.md
// section 5, which is also the order of --print-config.
type Config struct {
	Listen      string            `yaml:"listen" help:"address of the HTTP listener serving /ws, /healthz, /readyz (and /metrics unless adminListen is set)"`
	AdminListen string            `yaml:"adminListen" help:"separate address for /metrics; empty: /metrics on the main listener"`
	Redis       RedisConfig       `yaml:"redis"`
	Handshake   HandshakeConfig   `yaml:"handshake"`
	Auth        AuthConfig        `yaml:"auth"`
	Limits      LimitsConfig      `yaml:"limits"`
	Pressure    PressureConfig    `yaml:"pressure"`
	PublishRate PublishRateConfig `yaml:"publishRate"`
	Admission   AdmissionConfig   `yaml:"admission"`
	RPC         RPCConfig         `yaml:"rpc"`
	Drain       DrainConfig       `yaml:"drain"`
	Metrics     MetricsConfig     `yaml:"metrics"`
	Log         LogConfig         `yaml:"log"`
}

// RedisConfig is the cross-instance bus.
type RedisConfig struct {
	URL           string `yaml:"url" help:"redis:// or rediss:// URL; empty: single instance with the in-memory bus"`
	Bus           string `yaml:"bus" help:"single (one channel) | sharded (SSUBSCRIBE, Redis 7+, Redis Cluster)"`
	Partitions    int    `yaml:"partitions" help:"sharded bus: topics are hashed into this many channels (at least 1)"`
	ChannelPrefix string `yaml:"channelPrefix" help:"prefix of every Redis channel, for multi-tenant isolation (not empty)"`
}

// HandshakeConfig is the handshake tier (CONTRACT.md section 4).
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

// JWTConfig selects how tokens are verified; both empty: anonymous
// connections. At most one may be set.
type JWTConfig struct {
	HMACSecret    string `yaml:"hmacSecret" help:"HS256 key (the raw bytes of this string); empty with no publicKeyFile: anonymous connections"`
	PublicKeyFile string `yaml:"publicKeyFile" help:"PEM file with the RSA or EC public key for RS256 / ES256 tokens; read at start-up"`
}

// LimitsConfig bounds each connection.
type LimitsConfig struct {
	MaxMessageBytes         int64    `yaml:"maxMessageBytes" help:"largest client message; a larger one closes the connection with 1009 (positive)"`
	MaxSubscriptionsPerConn int      `yaml:"maxSubscriptionsPerConn" help:"topics one connection may subscribe to; past it: -32004 LIMIT_EXCEEDED (positive)"`
	SendQueueBytes          int64    `yaml:"sendQueueBytes" help:"bytes queued in the server for one client, not yet written to its socket; past this: close 1013 (positive)"`
	WriteTimeout            Duration `yaml:"writeTimeout" help:"longest one socket write may take (positive)"`
	PingInterval            Duration `yaml:"pingInterval" help:"period of WebSocket pings that detect dead peers (positive)"`
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
	HMACSecret      string   `yaml:"hmacSecret" help:"when set, envelopes are signed and unsigned or badly signed ones are dropped"`
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
	Concurrency         *ConcurrencyRule         `yaml:"concurrency,omitempty"`
}

// ClusterTopPublisherRule sheds while the topic's (or user's) cluster-wide
// publish rate is >= Threshold.
type ClusterTopPublisherRule struct {
	Threshold float64 `yaml:"threshold" help:"publish attempts per second, this instance plus every sibling's fresh slice, at which calls are shed (positive)"`
	By        string  `yaml:"by" help:"topic | user; empty: topic"`
}

// RateRule limits calls per key.
type RateRule struct {
	Limit int      `yaml:"limit" help:"calls allowed per period and key (positive)"`
	Per   Duration `yaml:"per" help:"the period (positive)"`
	By    string   `yaml:"by" help:"user | conn | ip; an anonymous connection's user key is its client IP; empty: user"`
}

// ConcurrencyRule caps in-flight calls of the class.
type ConcurrencyRule struct {
	Max int `yaml:"max" help:"calls of this class in flight at once on this instance (positive)"`
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

// DrainConfig is graceful shutdown.
type DrainConfig struct {
	Duration Duration `yaml:"duration" help:"connections are closed with 1012 spread over this window; 0 = all at once"`
}

// MetricsConfig is the Prometheus exposition.
type MetricsConfig struct {
	Namespace string `yaml:"namespace" help:"prefix for every metric name ([a-zA-Z_][a-zA-Z0-9_]*); empty: none"`
}

// LogConfig is the process log (log/slog). An rtserver addition to the
// contract's keys.
type LogConfig struct {
	Format string `yaml:"format" help:"text | json (rtserver addition)"`
	Level  string `yaml:"level" help:"debug | info | warn | error (rtserver addition)"`
}

// Default is CONTRACT.md section 5's defaults, plus log text/info.
// admission.classes and admission.methods are empty (nil).
func Default() Config {
	return Config{
		Listen:      "127.0.0.1:8080",
		AdminListen: "",
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
		Limits: LimitsConfig{
			MaxMessageBytes:         65536,
			MaxSubscriptionsPerConn: 128,
			SendQueueBytes:          1048576,
			WriteTimeout:            Duration(5 * time.Second),
			PingInterval:            Duration(25 * time.Second),
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

// envPrefix starts every environment variable Load reads.
const envPrefix = "RTSERVER_"

// usageOutput receives the -h usage text; tests silence it.
var usageOutput io.Writer = os.Stderr

// configFlags are the command-line flags, parsed before anything else
// because --config names the file.
type configFlags struct {
	fs                            *flag.FlagSet
	config                        string
	listen, adminListen, redisURL string
	logFormat, logLevel           string
	printConfig, printReference   bool
}

func newConfigFlags() *configFlags {
	f := &configFlags{fs: flag.NewFlagSet("rtserver", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(io.Discard) // errors are returned, usage is printed on -h only
	fs.StringVar(&f.config, "config", "", "YAML configuration `file`")
	fs.StringVar(&f.listen, "listen", "", "listen `address` (overrides listen)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin listen `address` for /metrics (overrides adminListen)")
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis `URL` (overrides redis.url)")
	fs.StringVar(&f.logFormat, "log-format", "", "log `format`: text | json (overrides log.format)")
	fs.StringVar(&f.logLevel, "log-level", "", "log `level`: debug | info | warn | error (overrides log.level)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration as YAML and exit")
	fs.BoolVar(&f.printReference, "config-reference", false, "print the configuration reference (Markdown) and exit")
	return f
}

func (f *configFlags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: rtserver [flags]\n\nConfiguration precedence: defaults < --config file < %s* environment < flags.\nSee docs/configuration.md or run rtserver --config-reference.\n\nFlags:\n", envPrefix)
	f.fs.SetOutput(w)
	f.fs.PrintDefaults()
	f.fs.SetOutput(io.Discard)
}

// Load builds the configuration: Default(), then the YAML file named by
// --config, then RTSERVER_* variables from environ, then flags; and
// validates the result. args excludes the program name (os.Args[1:]);
// environ is os.Environ(). On -h/--help it prints usage to stderr and
// returns flag.ErrHelp (exit 0). ActionPrintReference returns before any
// file or environment is read.
func Load(args []string, environ []string) (Config, Action, error) {
	cfg := Default()
	f := newConfigFlags()
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.usage(usageOutput)
			return cfg, ActionRun, flag.ErrHelp
		}
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: err.Error() + " (rtserver -h lists them)"}
	}
	if f.fs.NArg() > 0 {
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: fmt.Sprintf("unexpected argument %q", f.fs.Arg(0))}
	}
	action := ActionRun
	switch {
	case f.printConfig && f.printReference:
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: "--print-config and --config-reference exclude each other"}
	case f.printReference:
		return cfg, ActionPrintReference, nil
	case f.printConfig:
		action = ActionPrintConfig
	}

	// File and environment problems are reported together; validation
	// waits until both are clean, as it would only repeat them.
	var srcErr error
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return cfg, action, &KeyError{Key: "--config", Msg: err.Error()}
		}
		srcErr = decodeFile(&cfg, data, f.config)
	}
	if err := errors.Join(srcErr, applyEnv(&cfg, environ)); err != nil {
		return cfg, action, err
	}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "listen":
			cfg.Listen = f.listen
		case "admin-listen":
			cfg.AdminListen = f.adminListen
		case "redis-url":
			cfg.Redis.URL = f.redisURL
		case "log-format":
			cfg.Log.Format = f.logFormat
		case "log-level":
			cfg.Log.Level = f.logLevel
		}
	})
	cfg.normalize()
	if err := cfg.Validate(); err != nil {
		return cfg, action, err
	}
	return cfg, action, nil
}

// normalize puts equal configurations into one representation: empty lists
// and maps become nil, and a class rule's empty "by" becomes its default.
// Load does this, so --print-config shows what is in effect and reloads to
// an identical Config.
func (c *Config) normalize() {
	nilIfEmpty := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	c.Handshake.TrustedProxies = nilIfEmpty(c.Handshake.TrustedProxies)
	c.Handshake.AllowedOrigins = nilIfEmpty(c.Handshake.AllowedOrigins)
	if len(c.Admission.Classes) == 0 {
		c.Admission.Classes = nil
	}
	if len(c.Admission.Methods) == 0 {
		c.Admission.Methods = nil
	}
	for name, r := range c.Admission.Classes {
		r.Reasons = nilIfEmpty(r.Reasons)
		if r.ClusterTopPublisher != nil && r.ClusterTopPublisher.By == "" {
			ctp := *r.ClusterTopPublisher
			ctp.By = "topic"
			r.ClusterTopPublisher = &ctp
		}
		if r.Rate != nil && r.Rate.By == "" {
			rate := *r.Rate
			rate.By = "user"
			r.Rate = &rate
		}
		c.Admission.Classes[name] = r
	}
}

// YAML is the configuration as a YAML document, for --print-config. Loading
// it as a --config file gives back the same Config.
func (c Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(yamlNode(reflect.ValueOf(c))); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// yamlNode builds the YAML tree of a Config value. It is written out rather
// than left to yaml.v3's Marshal because that loses some strings (a leading
// newline), prints "<<" as a merge key and large floats in exponent form.
func yamlNode(v reflect.Value) *yaml.Node {
	t := v.Type()
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch {
	case t == durationType:
		return scalar("!!str", v.Interface().(Duration).String())
	case t.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := range t.NumField() {
			f := t.Field(i)
			fv := v.Field(i)
			if strings.HasSuffix(f.Tag.Get("yaml"), ",omitempty") && fv.IsZero() {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", yamlName(f)), yamlNode(fv))
		}
		return n
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			return scalar("!!null", "null")
		}
		return yamlNode(v.Elem())
	case t.Kind() == reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, yamlNode(k), yamlNode(v.MapIndex(k)))
		}
		if len(keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case t.Kind() == reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			n.Content = append(n.Content, yamlNode(v.Index(i)))
		}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case t.Kind() == reflect.String:
		s := v.String()
		switch {
		case !utf8.ValidString(s):
			return scalar("", s) // yaml.v3 writes it as !!binary, which reads back
		case !plainASCII(s) || s == "<<": // yaml.v3 would write "<<" bare: a merge key
			n := scalar("!!str", s)
			n.Style = yaml.DoubleQuotedStyle
			return n
		}
		return scalar("!!str", s) // quoted by yaml.v3 when it would read as another type
	case t.Kind() == reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case t.Kind() == reflect.Float64:
		return scalar("", formatFloat(v.Float()))
	}
	panic("config: yamlNode: unhandled type " + t.String())
}

// formatFloat writes f so that YAML reads it back as the same float64, in
// plain decimals when that is short (10485760, not 1.048576e+07).
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	if s := strconv.FormatFloat(f, 'f', -1, 64); len(s) <= 24 {
		return s
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// plainASCII reports whether s can be written unquoted or single-quoted
// without surprises: printable ASCII with no surrounding spaces.
func plainASCII(s string) bool {
	if s != strings.TrimSpace(s) {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// ---- schema: the leaves of the Config tree -------------------------------

// configLeaf is one settable key: a scalar, a list or a map.
type configLeaf struct {
	path  string // yaml key path, e.g. handshake.perIP.limit
	env   string // RTSERVER_HANDSHAKE_PERIP_LIMIT
	help  string
	index []int // reflect field index path from Config
	typ   reflect.Type
}

var durationType = reflect.TypeFor[Duration]()

// configLeaves lists every key of Config in declaration order.
var configLeaves = func() []configLeaf {
	var out []configLeaf
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			p := prefix + yamlName(f)
			idx := append(slices.Clone(index), i)
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(f.Type, p+".", idx)
				continue
			}
			out = append(out, configLeaf{
				path:  p,
				env:   envName(p),
				help:  f.Tag.Get("help"),
				index: idx,
				typ:   f.Type,
			})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}()

func envName(keyPath string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(keyPath, ".", "_"))
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// ---- the YAML file -------------------------------------------------------

// maxNodeVisits bounds the work of decoding one document: aliases and merge
// keys can make a small file describe an exponentially large tree.
const maxNodeVisits = 20_000

func decodeFile(cfg *Config, data []byte, name string) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: defaults
		}
		return &KeyError{Key: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return &KeyError{Key: name, Msg: "want one YAML document"}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	d := &nodeDecoder{file: name}
	if err := d.decode(doc.Content[0], reflect.ValueOf(cfg).Elem(), ""); err != nil {
		return err
	}
	if len(d.errs) > 0 {
		return errors.Join(d.errs...)
	}
	// The walk above is the decoder; yaml.v3's own strict decode is a second
	// opinion, so no key the walk might have missed is silently ignored.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var shadow Config
	if err := strict.Decode(&shadow); err != nil {
		return &KeyError{Key: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	return nil
}

// nodeDecoder decodes a yaml.Node into a Config (sub)value along the struct
// tree, so an unknown key or a bad value is reported with its key path.
type nodeDecoder struct {
	file   string // file name for positions; "" for environment values
	env    string // the environment variable, for values from the environment
	visits int
	errs   []error
}

func (d *nodeDecoder) fail(key string, n *yaml.Node, msg string) {
	src := d.env
	if d.file != "" {
		src = d.file + ":" + strconv.Itoa(n.Line)
	}
	d.errs = append(d.errs, &KeyError{Key: key, Msg: msg, Source: src})
}

var errTooComplex = errors.New("document too complex (aliases or merge keys expand past 20000 nodes)")

// decode sets v from n. It returns an error only when it must stop (too
// complex); per-key problems are collected in d.errs.
func (d *nodeDecoder) decode(n *yaml.Node, v reflect.Value, key string) error {
	for n.Kind == yaml.AliasNode {
		if d.visits++; d.visits > maxNodeVisits || n.Alias == nil {
			return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
		}
		n = n.Alias
	}
	if d.visits++; d.visits > maxNodeVisits {
		return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
	}
	isNull := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
	t := v.Type()
	switch {
	case t.Kind() == reflect.Struct && t != durationType:
		if isNull {
			return nil // an empty section keeps its defaults
		}
		if n.Kind != yaml.MappingNode {
			d.fail(d.whole(key), n, "want a mapping")
			return nil
		}
		return d.mapping(n, key, func(k string, kn, vn *yaml.Node) error {
			f, ok := fieldByYAMLName(t, k)
			if !ok {
				d.fail(join(key, k), kn, "unknown key")
				return nil
			}
			return d.decode(vn, v.FieldByIndex(f.Index), join(key, k))
		})
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if isNull {
			v.SetZero()
			return nil
		}
		nv := reflect.New(t.Elem())
		if err := d.decode(n, nv.Elem(), key); err != nil {
			return err
		}
		v.Set(nv) // replaces, never merges into, an earlier value
		return nil
	case t.Kind() == reflect.Map:
		if isNull {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.MappingNode {
			d.fail(d.whole(key), n, "want a mapping")
			return nil
		}
		m := reflect.MakeMap(t)
		err := d.mapping(n, key, func(k string, kn, vn *yaml.Node) error {
			ev := reflect.New(t.Elem()).Elem()
			if err := d.decode(vn, ev, join(key, k)); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k), ev)
			return nil
		})
		v.Set(m) // a map replaces the default map
		return err
	default:
		if isNull {
			v.SetZero()
			return nil
		}
		nv := reflect.New(t)
		if err := n.Decode(nv.Interface()); err != nil {
			d.fail(d.whole(key), n, valueMsg(t, n, err))
			return nil
		}
		v.Set(nv.Elem())
		return nil
	}
}

// whole is key, or "(top level)" for the document itself.
func (d *nodeDecoder) whole(key string) string {
	if key == "" {
		return "(top level)"
	}
	return key
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// mapping calls set for each pair of a mapping node: merged mappings (<<)
// first, then the explicit keys, which override them; a key given twice
// explicitly is an error.
func (d *nodeDecoder) mapping(n *yaml.Node, key string, set func(k string, kn, vn *yaml.Node) error) error {
	if d.visits++; d.visits > maxNodeVisits {
		return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for pass := range 2 {
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			isMerge := kn.Kind == yaml.ScalarNode && kn.ShortTag() == "!!merge"
			switch {
			case pass == 0 && isMerge:
				if err := d.merge(vn, key, set); err != nil {
					return err
				}
			case pass == 1 && !isMerge:
				var k string
				if kn.Kind != yaml.ScalarNode || kn.Decode(&k) != nil {
					d.fail(d.whole(key), kn, "keys must be strings")
					continue
				}
				if seen[k] {
					d.fail(join(key, k), kn, "duplicate key")
					continue
				}
				seen[k] = true
				if err := set(k, kn, vn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// merge applies a << value: a mapping, or a sequence of mappings where
// earlier ones win.
func (d *nodeDecoder) merge(vn *yaml.Node, key string, set func(k string, kn, vn *yaml.Node) error) error {
	for vn.Kind == yaml.AliasNode && vn.Alias != nil {
		if d.visits++; d.visits > maxNodeVisits {
			return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
		}
		vn = vn.Alias
	}
	switch vn.Kind {
	case yaml.MappingNode:
		return d.mapping(vn, key, set)
	case yaml.SequenceNode:
		for i := len(vn.Content) - 1; i >= 0; i-- {
			m := vn.Content[i]
			for m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			if m.Kind != yaml.MappingNode {
				d.fail(d.whole(key), vn, "<< wants a mapping or a list of mappings")
				return nil
			}
			if err := d.mapping(m, key, set); err != nil {
				return err
			}
		}
		return nil
	}
	d.fail(d.whole(key), vn, "<< wants a mapping or a list of mappings")
	return nil
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// valueMsg explains a value that does not fit its key's type.
func valueMsg(t reflect.Type, n *yaml.Node, err error) string {
	if t == durationType {
		return err.Error()
	}
	got := n.Value
	if n.Kind != yaml.ScalarNode {
		got = map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[n.Kind]
		return "want " + typeWord(t) + ", got " + got
	}
	return fmt.Sprintf("want %s, got %q", typeWord(t), got)
}

func typeWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a Go duration such as 10ms or 2s"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "an integer"
	case t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice:
		return "a list of " + strings.TrimPrefix(typeWord(t.Elem()), "a ") + "s"
	case t.Kind() == reflect.Map:
		return "a mapping"
	}
	return t.String()
}

// ---- the environment -----------------------------------------------------

var leafByEnv = func() map[string]*configLeaf {
	m := make(map[string]*configLeaf, len(configLeaves))
	for i := range configLeaves {
		m[configLeaves[i].env] = &configLeaves[i]
	}
	return m
}()

// applyEnv applies the RTSERVER_* variables of environ. When a name occurs
// twice the first one counts, as with os.Getenv.
func applyEnv(cfg *Config, environ []string) error {
	vals := make(map[string]string)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, envPrefix) {
			continue
		}
		if _, dup := vals[k]; !dup {
			vals[k] = v
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		leaf, ok := leafByEnv[k]
		if !ok {
			errs = append(errs, &KeyError{Key: k, Msg: "unknown environment variable"})
			continue
		}
		errs = append(errs, setFromString(reflect.ValueOf(cfg).Elem().FieldByIndex(leaf.index), vals[k], leaf.path, k)...)
	}
	return errors.Join(errs...)
}

// setFromString sets a leaf from an environment value: scalars literally
// (strings are taken as they are, with no quoting or trimming), lists comma
// separated, maps as a YAML flow value.
func setFromString(v reflect.Value, s, key, env string) []error {
	bad := func(msg string) []error { return []error{&KeyError{Key: key, Msg: msg, Source: env}} }
	t := v.Type()
	trimmed := strings.TrimSpace(s)
	switch {
	case t == durationType:
		d, err := parseDuration(s)
		if err != nil {
			return bad(err.Error())
		}
		v.Set(reflect.ValueOf(d))
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(trimmed)
		if err != nil {
			return bad(fmt.Sprintf("want true or false, got %q", s))
		}
		v.SetBool(b)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		i, err := strconv.ParseInt(trimmed, 10, t.Bits())
		if err != nil {
			return bad(fmt.Sprintf("want an integer, got %q", s))
		}
		v.SetInt(i)
	case t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(trimmed, 64)
		if err != nil {
			return bad(fmt.Sprintf("want a number, got %q", s))
		}
		v.SetFloat(f)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		var list []string
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
	case t.Kind() == reflect.Map:
		if trimmed == "" {
			v.SetZero()
			return nil
		}
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
			return bad("want a YAML flow mapping such as {a: b}: " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 {
			v.SetZero()
			return nil
		}
		d := &nodeDecoder{env: env}
		if err := d.decode(doc.Content[0], v, key); err != nil {
			return []error{err}
		}
		return d.errs
	default:
		return bad("cannot be set from the environment")
	}
	return nil
}

// ---- validation ----------------------------------------------------------

var (
	metricNamespaceRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	knownReasons      = []string{"MEMORY", "PUBLISH_RATE", "SUBSCRIBERS"}
)

// Validate checks every key and returns all problems at once (errors.Join
// of *KeyError), or nil. It reads auth.jwt.publicKeyFile to check that it
// holds a PEM block.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	oneOf := func(key, got string, allowed ...string) {
		if !slices.Contains(allowed, got) {
			bad(key, "must be %s, got %q", strings.Join(allowed, " or "), got)
		}
	}
	nonNegative := func(key string, n int64) {
		if n < 0 {
			bad(key, "must not be negative, got %d", n)
		}
	}
	positive := func(key string, n int64) {
		if n <= 0 {
			bad(key, "must be positive, got %d", n)
		}
	}
	positiveDur := func(key string, d Duration) {
		if d <= 0 {
			bad(key, "must be a positive duration, got %s", d)
		}
	}
	nonNegativeDur := func(key string, d Duration) {
		if d < 0 {
			bad(key, "must not be negative, got %s", d)
		}
	}
	threshold := func(key string, f float64) { // 0 = off
		if !(f >= 0) || math.IsInf(f, 0) {
			bad(key, "must be a finite number >= 0 (0 = off), got %v", f)
		}
	}
	hostPort := func(key, addr string, emptyOK bool) {
		if addr == "" && emptyOK {
			return
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(key, "must be host:port, got %q", addr)
		}
	}
	urlOf := func(key, raw string, schemes ...string) {
		if raw == "" {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" {
			bad(key, "must be a %s:// URL with a host, got %q", strings.Join(schemes, ":// or "), raw)
		}
	}
	glob := func(key, pattern string) {
		if pattern == "" {
			bad(key, "empty pattern")
		} else if _, err := path.Match(pattern, ""); err != nil {
			bad(key, "bad glob pattern %q (path.Match syntax)", pattern)
		}
	}

	hostPort("listen", c.Listen, false)
	hostPort("adminListen", c.AdminListen, true)

	urlOf("redis.url", c.Redis.URL, "redis", "rediss")
	oneOf("redis.bus", c.Redis.Bus, "single", "sharded")
	positive("redis.partitions", int64(c.Redis.Partitions))
	if c.Redis.ChannelPrefix == "" {
		bad("redis.channelPrefix", "must not be empty")
	}

	h := &c.Handshake
	nonNegative("handshake.maxConnections", int64(h.MaxConnections))
	nonNegative("handshake.maxConcurrent", int64(h.MaxConcurrent))
	nonNegative("handshake.perTickBudget", int64(h.PerTickBudget))
	if h.PerTickBudget > 0 {
		positiveDur("handshake.tick", h.Tick)
	} else {
		nonNegativeDur("handshake.tick", h.Tick)
	}
	nonNegativeDur("handshake.maxQueueWait", h.MaxQueueWait)
	oneOf("handshake.reject", h.Reject, "http", "close")
	positiveDur("handshake.retryAfter", h.RetryAfter)
	nonNegative("handshake.perIP.limit", int64(h.PerIP.Limit))
	if h.PerIP.Limit > 0 {
		positiveDur("handshake.perIP.per", h.PerIP.Per)
	} else {
		nonNegativeDur("handshake.perIP.per", h.PerIP.Per)
	}
	for i, p := range h.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			bad(fmt.Sprintf("handshake.trustedProxies[%d]", i), "bad CIDR %q (want e.g. 10.0.0.0/8 or fd00::/8)", p)
		}
	}
	for i, p := range h.AllowedOrigins {
		glob(fmt.Sprintf("handshake.allowedOrigins[%d]", i), p)
	}

	j := &c.Auth.JWT
	switch {
	case j.HMACSecret != "" && j.PublicKeyFile != "":
		bad("auth.jwt", "set hmacSecret or publicKeyFile, not both")
	case j.PublicKeyFile != "":
		if data, err := os.ReadFile(j.PublicKeyFile); err != nil {
			bad("auth.jwt.publicKeyFile", "%v", err)
		} else if b, _ := pem.Decode(data); b == nil {
			bad("auth.jwt.publicKeyFile", "%s holds no PEM block", j.PublicKeyFile)
		}
	}

	l := &c.Limits
	positive("limits.maxMessageBytes", l.MaxMessageBytes)
	positive("limits.maxSubscriptionsPerConn", int64(l.MaxSubscriptionsPerConn))
	positive("limits.sendQueueBytes", l.SendQueueBytes)
	positiveDur("limits.writeTimeout", l.WriteTimeout)
	positiveDur("limits.pingInterval", l.PingInterval)

	p := &c.Pressure
	positiveDur("pressure.sampleInterval", p.SampleInterval)
	if r := p.MemoryHeapUsedRatio; !(r >= 0 && r <= 1) {
		bad("pressure.memoryHeapUsedRatio", "must be in (0, 1], or 0 = off, got %v", r)
	}
	nonNegative("pressure.memoryLimitBytes", p.MemoryLimitBytes)
	threshold("pressure.publishRatePerSec", p.PublishRatePerSec)
	threshold("pressure.subscriberRatio", p.SubscriberRatio)
	threshold("pressure.topicPublishRatePerSec", p.TopicPublishRatePerSec)
	threshold("pressure.topicPublishBytesPerSec", p.TopicPublishBytesPerSec)
	positive("pressure.topN", int64(p.TopN))

	pr := &c.PublishRate
	if pr.Channel == "" {
		bad("publishRate.channel", "must not be empty")
	}
	positiveDur("publishRate.publishInterval", pr.PublishInterval)
	if pr.StaleAfter < pr.PublishInterval {
		bad("publishRate.staleAfter", "must be at least publishRate.publishInterval (%s), got %s", pr.PublishInterval, pr.StaleAfter)
	}
	positive("publishRate.topN", int64(pr.TopN))

	a := &c.Admission
	oneOf("admission.failPolicy", a.FailPolicy, "open", "closed")
	for _, name := range slices.Sorted(maps.Keys(a.Classes)) {
		r := a.Classes[name]
		key := "admission.classes." + name
		if name == "" || !utf8.ValidString(name) {
			bad(key, "class name must be non-empty UTF-8 text")
		}
		if len(r.Reasons) == 0 && r.ClusterTopPublisher == nil && r.Rate == nil && r.Concurrency == nil {
			bad(key, "a rule needs at least one of reasons, clusterTopPublisher, rate, concurrency")
		}
		for _, reason := range r.Reasons {
			if !slices.Contains(knownReasons, reason) {
				bad(key+".reasons", "unknown reason %q (want %s)", reason, strings.Join(knownReasons, ", "))
			}
		}
		if t := r.ClusterTopPublisher; t != nil {
			if !(t.Threshold > 0) || math.IsInf(t.Threshold, 0) {
				bad(key+".clusterTopPublisher.threshold", "must be a positive number, got %v", t.Threshold)
			}
			oneOf(key+".clusterTopPublisher.by", t.By, "topic", "user")
		}
		if rt := r.Rate; rt != nil {
			positive(key+".rate.limit", int64(rt.Limit))
			positiveDur(key+".rate.per", rt.Per)
			oneOf(key+".rate.by", rt.By, "user", "conn", "ip")
		}
		if cc := r.Concurrency; cc != nil {
			positive(key+".concurrency.max", int64(cc.Max))
		}
	}
	for _, m := range slices.Sorted(maps.Keys(a.Methods)) {
		key := "admission.methods." + m
		if !utf8.ValidString(m) {
			bad(key, "method pattern must be UTF-8 text")
		}
		glob(key, m)
		if cl := a.Methods[m]; !classDefined(a.Classes, cl) {
			bad(key, "class %q is not defined in admission.classes", cl)
		}
	}

	urlOf("rpc.proxy.url", c.RPC.Proxy.URL, "http", "https")
	positiveDur("rpc.proxy.timeout", c.RPC.Proxy.Timeout)

	nonNegativeDur("drain.duration", c.Drain.Duration)

	if ns := c.Metrics.Namespace; ns != "" && !metricNamespaceRE.MatchString(ns) {
		bad("metrics.namespace", "must match [a-zA-Z_][a-zA-Z0-9_]*, got %q", ns)
	}

	oneOf("log.format", c.Log.Format, "text", "json")
	oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")

	return errors.Join(errs...)
}

func classDefined(classes map[string]ClassRule, name string) bool {
	_, ok := classes[name]
	return ok
}
