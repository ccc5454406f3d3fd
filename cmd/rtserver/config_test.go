package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/conf"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/pressure"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// contractYAML is every documented key with its default (as in
// docs/configuration.md), plus an example admission block that shows the
// shape, not defaults.
const contractYAML = `listen: 127.0.0.1:8080
adminListen: ""                  # empty: /metrics on the main listener
http:
  readHeaderTimeout: 10s         # request head
  readTimeout: 30s               # whole request
  idleTimeout: 120s              # keep-alive connection with no next request
redis:
  url: ""                        # empty: single instance, in-memory bus
  bus: single                    # single (one channel) | sharded (SSUBSCRIBE, Redis 7+, Redis Cluster)
  partitions: 16                 # sharded bus: topics hashed into this many channels
  channelPrefix: "rt:"           # multi-tenant isolation
  publishQueue: 8192             # publishes waiting for Redis; past it they wait, then are shed (BUS)
  publishWait: 50ms              # how long a publish waits for room in a full queue
  sentinel:
    addrs: []                    # Redis Sentinels; redis.url's host names the primary
    password: ""                 # the Sentinels' own password
handshake:
  maxConnections: 0
  maxConcurrent: 1000
  perTickBudget: 64
  tick: 10ms
  maxQueueWait: 2s
  reject: http                   # http | close
  retryAfter: 1s                 # base of the jittered hint
  perIP: {limit: 0, per: 10s}    # 0 = off
  trustedProxies: []
  allowedOrigins: []             # empty: same-host only
  allowNoOrigin: true
auth:
  jwt: {hmacSecret: "", publicKeyFile: "", jwksUrl: "", audience: "", issuer: "", requireExp: false, maxLifetime: 0s, refreshNotice: 30s}
topics:
  namespaces: []                 # ordered; the first whose pattern matches the topic decides
  default: {subscribe: [any], publish: [any], presence: false, joinLeave: false, history: {size: 0, ttl: 0s}}   # topics no namespace matches
  proxy: {url: "", timeout: 1s, cacheTTL: 0s, fail: closed}
history:
  metaTtl: 720h                  # how long a topic's epoch and last offset outlive its messages
  maxReplay: 10000               # most messages one recovery replays
  idempotencyTtl: 300s           # how long a publish's idempotencyKey is remembered
  memoryMaxBytes: 134217728      # without Redis: the in-process history's byte cap
presence:
  ttl: 60s                       # an entry not refreshed for this long is gone (an instance that died)
  diffInterval: 1s               # join/leave diffs are coalesced per topic for this long
limits:
  maxMessageBytes: 65536
  maxSubscriptionsPerConn: 128
  sendQueueBytes: 1048576        # bytes queued in the server for one client, not yet written to its socket; past this: close 1013
  writeTimeout: 5s
  pingInterval: 25s
  messageTimeout: 30s            # a message begun must be completed within this (1008)
  portableSockets: false         # true: no socket calls of our own, the WebSocket library alone
  maxJSONDepth: 64               # deeper JSON in a client message or an API body is refused
pressure:
  sampleInterval: 1s
  memoryHeapUsedRatio: 0.85      # heap in use / memory limit (GOMEMLIMIT or memoryLimitBytes)
  memoryLimitBytes: 0
  publishRatePerSec: 10000
  subscriberRatio: 50
  topicPublishRatePerSec: 5000
  topicPublishBytesPerSec: 10485760
  topN: 20
publishRate:                     # the cluster aggregator; active when redis.url is set
  channel: "rt:pressure:rates"
  publishInterval: 250ms
  staleAfter: 12s
  topN: 20
  maxClockSkew: 5s               # clocks may be this far apart; older envelopes and replays are dropped
  maxInstances: 1024             # siblings held at most; envelopes of further instances are ignored and counted
  mode: merged                   # merged: slices to one merging instance elected through Redis, which publishes the merged view | broadcast
  hmacSecret: ""                 # when set, unsigned or badly signed envelopes are dropped
admission:
  classes:                       # class name -> rule
    expensive-rpc: {reasons: [MEMORY, PUBLISH_RATE]}
    cluster-broadcast: {clusterTopPublisher: {threshold: 1000, by: topic}}   # by: topic | user
    chat: {rate: {limit: 20, per: 1s, by: user}, concurrency: {max: 8}}   # by: user | conn | ip; an anonymous connection's user key is its client IP
  methods:                       # method name or glob -> class; unmatched methods are admitted
    publish: cluster-broadcast
    "report.*": expensive-rpc
  failPolicy: open               # what a rule that errors or panics decides: open | closed
rpc:
  proxy: {url: "", timeout: 5s}  # POST the JSON-RPC request, relay the JSON-RPC response
api:
  key: ""                        # empty: the server API is off
drain:
  duration: 10s                  # connections are closed with 1012 spread over this window
metrics:
  namespace: ""                  # prefix for every metric name
`

// contractAdmission is what the contract's admission block means.
func contractAdmission() message.Config {
	return message.Config{
		Classes: map[string]message.Rule{
			"expensive-rpc":     {Reasons: []pressure.Reason{pressure.Memory, pressure.PublishRate}},
			"cluster-broadcast": {ClusterTopPublisher: &message.ClusterTopPublisher{Threshold: 1000, By: "topic"}},
			"chat": {
				Rate:        &message.Rate{Limit: 20, Per: time.Second, By: "user", Strategy: "gcra", Scope: "local"},
				Concurrency: &message.Concurrency{Max: 8},
			},
		},
		Methods:    map[string]string{"publish": "cluster-broadcast", "report.*": "expensive-rpc"},
		FailPolicy: message.FailOpen,
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rtserver.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// errorKeys lists the Key of every KeyError in err (errors.Join trees included).
func errorKeys(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if ke, ok := e.(*KeyError); ok {
			keys = append(keys, ke.Key)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		keys = append(keys, "<not a KeyError: "+e.Error()+">")
	}
	walk(err)
	return keys
}

func TestDefaultMatchesContract(t *testing.T) {
	t.Parallel()

	// The contract's block decoded into a zero Config, not on top of the
	// defaults: every documented default is written in it.
	var fromContract rtserver.Config
	if err := conf.DecodeYAML(&fromContract, []byte(contractYAML), "contract.yaml"); err != nil {
		t.Fatalf("the contract YAML does not decode strictly into Config: %v", err)
	}
	raw := contractAdmission()
	raw.Classes["chat"].Rate.Strategy = "" // filled in by normalize, not by the decoder
	raw.Classes["chat"].Rate.Scope = ""
	if !reflect.DeepEqual(fromContract.Admission, raw) {
		t.Errorf("contract admission decoded to %+v", fromContract.Admission)
	}
	fromContract.Admission = message.Config{FailPolicy: fromContract.Admission.FailPolicy}
	fromContract.Log = rtserver.Log{Format: "text", Level: "info"} // not in the YAML above
	// Fields that are not configuration keep their library defaults.
	if want := rtserver.DefaultConfig(); !sameConfig(fromContract, want) {
		t.Errorf("Default() differs from the documented defaults:\n got: %+v\nwant: %+v", want, fromContract)
	}

	// Through Load: the contract block is a valid file, and loading it
	// changes nothing but the admission maps.
	cfg, action, err := Load([]string{"--config", writeFile(t, contractYAML)}, nil)
	if err != nil || action != ActionRun {
		t.Fatalf("Load(contract) = %v, %v", action, err)
	}
	want := rtserver.DefaultConfig()
	want.Admission = contractAdmission()
	if !sameConfig(cfg, want) {
		t.Errorf("Load(contract):\n got %+v\nwant %+v", cfg, want)
	}
}

// TestKeysMatchContract: Config has exactly the contract's keys, plus log.*.
func TestKeysMatchContract(t *testing.T) {
	t.Parallel()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(contractYAML), &doc); err != nil {
		t.Fatal(err)
	}
	var contractKeys []string
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode || prefix == "admission.classes" || prefix == "admission.methods" {
			contractKeys = append(contractKeys, prefix)
			return
		}
		for i := 0; i < len(n.Content); i += 2 {
			walk(n.Content[i+1], strings.TrimPrefix(prefix+"."+n.Content[i].Value, "."))
		}
	}
	walk(doc.Content[0], "")
	contractKeys = append(contractKeys, "log.format", "log.level")

	var ours, envs []string
	for _, l := range configLeaves {
		ours = append(ours, l.Path)
		envs = append(envs, l.Env)
		if l.Help == "" {
			t.Errorf("%s has no help tag", l.Path)
		}
	}
	if !slices.Equal(ours, contractKeys) {
		t.Errorf("Config keys differ from the contract's (in order):\n ours: %v\nthem: %v", ours, contractKeys)
	}
	slices.Sort(envs)
	if len(slices.Compact(envs)) != len(configLeaves) {
		t.Errorf("environment variable names collide: %v", envs)
	}
	for _, want := range []string{"RTSERVER_LISTEN", "RTSERVER_REDIS_URL", "RTSERVER_HANDSHAKE_MAXCONCURRENT",
		"RTSERVER_HANDSHAKE_PERIP_LIMIT", "RTSERVER_AUTH_JWT_HMACSECRET", "RTSERVER_DRAIN_DURATION",
		"RTSERVER_ADMISSION_CLASSES", "RTSERVER_ADMISSION_METHODS", "RTSERVER_LOG_LEVEL"} {
		if !slices.ContainsFunc(configLeaves, func(l conf.Leaf) bool { return l.Env == want }) {
			t.Errorf("no environment variable %s", want)
		}
	}
}

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "listen: file:1\nredis: {url: redis://file:6379}\nlog: {level: debug}\nhandshake: {maxConcurrent: 7}\n")
	tests := []struct {
		name string
		args []string
		env  []string
		want func(c *rtserver.Config)
	}{
		{
			name: "defaults only",
			want: func(c *rtserver.Config) {},
		},
		{
			name: "file over defaults",
			args: []string{"--config", file},
			want: func(c *rtserver.Config) {
				c.Listen, c.Redis.URL, c.Log.Level, c.Handshake.MaxConcurrent = "file:1", "redis://file:6379", "debug", 7
			},
		},
		{
			name: "env over file",
			args: []string{"--config", file},
			env:  []string{"RTSERVER_LISTEN=env:2", "RTSERVER_HANDSHAKE_MAXCONCURRENT=9", "PATH=/bin"},
			want: func(c *rtserver.Config) {
				c.Listen, c.Redis.URL, c.Log.Level, c.Handshake.MaxConcurrent = "env:2", "redis://file:6379", "debug", 9
			},
		},
		{
			name: "flags over env over file",
			args: []string{"--config", file, "--listen", "flag:3", "--redis-url=rediss://flag:1", "--log-level", "warn", "--log-format", "json", "--admin-listen", ":9090"},
			env:  []string{"RTSERVER_LISTEN=env:2", "RTSERVER_REDIS_URL=redis://env", "RTSERVER_LOG_FORMAT=text", "RTSERVER_ADMINLISTEN=:1"},
			want: func(c *rtserver.Config) {
				c.Listen, c.Redis.URL, c.Log.Level, c.Log.Format, c.AdminListen = "flag:3", "rediss://flag:1", "warn", "json", ":9090"
				c.Handshake.MaxConcurrent = 7
			},
		},
		{
			name: "an explicit empty flag still overrides",
			args: []string{"--config", file, "--redis-url", ""},
			want: func(c *rtserver.Config) {
				c.Listen, c.Log.Level, c.Handshake.MaxConcurrent = "file:1", "debug", 7
			},
		},
		{
			name: "first of duplicated variables wins",
			env:  []string{"RTSERVER_LISTEN=a:1", "RTSERVER_LISTEN=b:2"},
			want: func(c *rtserver.Config) { c.Listen = "a:1" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, action, err := Load(tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if action != ActionRun {
				t.Errorf("action = %v", action)
			}
			want := rtserver.DefaultConfig()
			tt.want(&want)
			if !sameConfig(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestLoadEnvValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give string
		want func(c *rtserver.Config)
	}{
		{"RTSERVER_HANDSHAKE_TICK=250ms", func(c *rtserver.Config) { c.Handshake.Tick = 250 * time.Millisecond }},
		{"RTSERVER_HANDSHAKE_PERIP_LIMIT=5", func(c *rtserver.Config) { c.Handshake.PerIP.Limit = 5 }},
		{"RTSERVER_HANDSHAKE_ALLOWNOORIGIN=false", func(c *rtserver.Config) { c.Handshake.AllowNoOrigin = false }},
		{"RTSERVER_PRESSURE_MEMORYHEAPUSEDRATIO= 0.5 ", func(c *rtserver.Config) { c.Pressure.MemoryHeapUsedRatio = 0.5 }},
		{"RTSERVER_HANDSHAKE_TRUSTEDPROXIES=10.0.0.0/8, fd00::/8,", func(c *rtserver.Config) {
			c.Handshake.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
		}},
		{"RTSERVER_HANDSHAKE_ALLOWEDORIGINS=", func(c *rtserver.Config) {}},
		{"RTSERVER_AUTH_JWT_HMACSECRET= s3cr#t ", func(c *rtserver.Config) { c.Auth.JWT.HMACSecret = []byte(" s3cr#t ") }},
		{"RTSERVER_DRAIN_DURATION=0", func(c *rtserver.Config) { c.Drain.Duration = 0 }},
		{"RTSERVER_LIMITS_SENDQUEUEBYTES=2097152", func(c *rtserver.Config) { c.Limits.SendQueueBytes = 2097152 }},
		{"RTSERVER_ADMISSION_CLASSES={chat: {rate: {limit: 5, per: 2s}}, big: {reasons: [MEMORY]}}", func(c *rtserver.Config) {
			c.Admission.Classes = map[string]message.Rule{
				"chat": {Rate: &message.Rate{Limit: 5, Per: 2 * time.Second, By: "user", Strategy: "gcra", Scope: "local"}},
				"big":  {Reasons: []pressure.Reason{pressure.Memory}},
			}
		}},
		{"RTSERVER_ADMISSION_METHODS={}", func(c *rtserver.Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			t.Parallel()
			got, _, err := Load(nil, []string{tt.give})
			if err != nil {
				t.Fatal(err)
			}
			want := rtserver.DefaultConfig()
			tt.want(&want)
			if !sameConfig(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestEnvMapReplacesFileMap: maps are replaced, never merged.
func TestEnvMapReplacesFileMap(t *testing.T) {
	t.Parallel()
	file := writeFile(t, contractYAML)
	got, _, err := Load([]string{"--config", file}, []string{
		"RTSERVER_ADMISSION_CLASSES={solo: {concurrency: {max: 1}}}",
		"RTSERVER_ADMISSION_METHODS={\"x.*\": solo}",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]message.Rule{"solo": {Concurrency: &message.Concurrency{Max: 1}}}
	if !reflect.DeepEqual(got.Admission.Classes, want) || !reflect.DeepEqual(got.Admission.Methods, map[string]string{"x.*": "solo"}) {
		t.Errorf("admission = %+v", got.Admission)
	}
}

func TestLoadFileFeatures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give string
		want func(c *rtserver.Config)
	}{
		{"empty file", "", func(c *rtserver.Config) {}},
		{"comments only", "# nothing\n", func(c *rtserver.Config) {}},
		{"empty section keeps defaults", "redis:\nhandshake: {}\n", func(c *rtserver.Config) {}},
		{"null scalar is zero", "handshake: {maxConcurrent: ~, trustedProxies: ~}\n", func(c *rtserver.Config) { c.Handshake.MaxConcurrent = 0 }},
		{"file map replaces default", "admission: {classes: {a: {reasons: [SUBSCRIBERS]}}}\n", func(c *rtserver.Config) {
			c.Admission.Classes = map[string]message.Rule{"a": {Reasons: []pressure.Reason{pressure.Subscribers}}}
		}},
		{"anchors and merge keys", `
x-base: &base {limit: 3, per: 1s, by: conn}
admission:
  classes:
    a: {rate: {<<: *base, limit: 9}}
    b: {rate: *base}
`[1:], nil}, // x-base is an unknown key: see below
		{"merge keys at a known place", `
handshake:
  perIP: &p {limit: 4, per: 2s}
admission:
  classes:
    a: {rate: {<<: [{limit: 1, by: ip}, {limit: 2, per: 3s}], limit: 9}}
`[1:], func(c *rtserver.Config) {
			c.Handshake.PerIP = handshake.PerIP{Limit: 4, Per: 2 * time.Second}
			c.Admission.Classes = map[string]message.Rule{"a": {Rate: &message.Rate{Limit: 9, Per: 3 * time.Second, By: "ip", Strategy: "gcra", Scope: "local"}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, _, err := Load([]string{"--config", writeFile(t, tt.give)}, nil)
			if tt.want == nil {
				if !slices.Equal(errorKeys(err), []string{"x-base"}) {
					t.Fatalf("want only x-base unknown, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := rtserver.DefaultConfig()
			tt.want(&want)
			if !sameConfig(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string
		env     []string
		wantErr string
	}{
		{"file", "handshake:\n  maxConcurent: 5\n", nil, `handshake.maxConcurent: unknown key (did you mean "maxConcurrent"?) (FILE:2)`},
		{"file top level", "listn: x\n", nil, `listn: unknown key (did you mean "listen"?) (FILE:1)`},
		{"file inside a class rule", "admission: {classes: {a: {rate: {limit: 1, per: 1s, bye: user}}}}\n", nil,
			`admission.classes.a.rate.bye: unknown key (did you mean "by"?) (FILE:1)`},
		{"env", "", []string{"RTSERVER_HANDSHAKE_MAXCONCURENT=5"}, "RTSERVER_HANDSHAKE_MAXCONCURENT: unknown environment variable (did you mean RTSERVER_HANDSHAKE_MAXCONCURRENT?)"},
		{"env with an underscore inside a key", "", []string{"RTSERVER_HANDSHAKE_MAX_CONNECTIONS=5"},
			"RTSERVER_HANDSHAKE_MAX_CONNECTIONS: unknown environment variable (did you mean RTSERVER_HANDSHAKE_MAXCONNECTIONS?)"},
		{"env nothing near", "", []string{"RTSERVER_NOTHING_LIKE_IT=5"}, "RTSERVER_NOTHING_LIKE_IT: unknown environment variable"},
		{"env map value", "", []string{"RTSERVER_ADMISSION_CLASSES={a: {reason: [MEMORY]}}"},
			`admission.classes.a.reason: unknown key (did you mean "reasons"?) (RTSERVER_ADMISSION_CLASSES)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := writeFile(t, tt.file)
			_, _, err := Load([]string{"--config", file}, tt.env)
			if err == nil {
				t.Fatal("no error")
			}
			if want := strings.ReplaceAll(tt.wantErr, "FILE", file); err.Error() != want {
				t.Errorf("error = %q\n want %q", err, want)
			}
		})
	}
}

// TestErrorsNameTheirKey: every invalid value stops Load with a KeyError
// naming the key.
func TestErrorsNameTheirKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "key.txt")
	if err := os.WriteFile(notPEM, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give    string // YAML file
		env     string
		args    []string
		wantKey string
	}{
		// type errors in the file
		{give: "handshake: {maxConcurrent: lots}", wantKey: "handshake.maxConcurrent"},
		{give: "handshake: {tick: 10}", wantKey: "handshake.tick"},
		{give: "handshake: {tick: [1s]}", wantKey: "handshake.tick"},
		{give: "handshake: {allowNoOrigin: maybe}", wantKey: "handshake.allowNoOrigin"},
		{give: "handshake: {trustedProxies: 10.0.0.0/8}", wantKey: "handshake.trustedProxies"},
		{give: "handshake: 5", wantKey: "handshake"},
		{give: "admission: {classes: [a]}", wantKey: "admission.classes"},
		{give: "handshake: {tick: 1s, tick: 2s}", wantKey: "handshake.tick"},
		{give: "- a\n- b", wantKey: "(top level)"},
		{give: "pressure: {memoryLimitBytes: -1}", wantKey: "pressure.memoryLimitBytes"}, // a type error: unsigned
		{give: "handshake: {trustedProxies: [10.0.0.0/8, 10.0.0.1]}", wantKey: "handshake.trustedProxies[1]"},
		{give: "handshake: {reject: drop}", wantKey: "handshake.reject"},
		{give: "admission: {classes: {a: {reasons: [CPU]}}}", wantKey: "admission.classes.a.reasons[0]"},
		{give: "admission: {failPolicy: maybe}", wantKey: "admission.failPolicy"},
		// type errors in the environment
		{env: "RTSERVER_HANDSHAKE_MAXCONCURRENT=lots", wantKey: "handshake.maxConcurrent"},
		{env: "RTSERVER_HANDSHAKE_TICK=10", wantKey: "handshake.tick"},
		{env: "RTSERVER_HANDSHAKE_ALLOWNOORIGIN=maybe", wantKey: "handshake.allowNoOrigin"},
		{env: "RTSERVER_PRESSURE_SUBSCRIBERRATIO=x", wantKey: "pressure.subscriberRatio"},
		{env: "RTSERVER_ADMISSION_METHODS=[a]", wantKey: "admission.methods"},
		{env: "RTSERVER_ADMISSION_METHODS={a: {b: c}}", wantKey: "admission.methods.a"},
		{env: "RTSERVER_ADMISSION_CLASSES={a: [", wantKey: "admission.classes"},
		// validation (the rules themselves: TestConfigValidateNamesKeys in the root package)
		{give: "listen: nonsense", wantKey: "listen"},
		{give: "limits: {maxJSONDepth: -1}", wantKey: "limits.maxJSONDepth"},
		{give: "admission: {classes: {a: {rate: {limit: 1, per: 1s, scope: cluster}}}}", wantKey: "admission.classes.a.rate.scope"},
		{args: []string{"--redis-url", "redis://"}, wantKey: "redis.url"},
		{env: "RTSERVER_HANDSHAKE_TRUSTEDPROXIES=10.0.0.0/8,x", wantKey: "handshake.trustedProxies[1]"},
		{args: []string{"--log-level", "trace"}, wantKey: "log.level"},
		// flags
		{args: []string{"--nope"}, wantKey: "flags"},
		{args: []string{"serve"}, wantKey: "flags"},
		{args: []string{"--print-config", "--config-reference"}, wantKey: "flags"},
		{args: []string{"--config", filepath.Join(dir, "missing.yaml")}, wantKey: "--config"},
	}
	for _, tt := range tests {
		t.Run(tt.wantKey+"/"+tt.give+tt.env+strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if tt.give != "" {
				args = append([]string{"--config", writeFile(t, tt.give)}, args...)
			}
			var env []string
			if tt.env != "" {
				env = []string{tt.env}
			}
			_, _, err := Load(args, env)
			if err == nil {
				t.Fatal("no error")
			}
			keys := errorKeys(err)
			if !slices.Contains(keys, tt.wantKey) {
				t.Errorf("error %q names keys %q, want %q", err, keys, tt.wantKey)
			}
			if !strings.Contains(err.Error(), tt.wantKey+": ") {
				t.Errorf("error %q does not start its line with the key", err)
			}
		})
	}
}

func TestClassRuleByDefaults(t *testing.T) {
	t.Parallel()
	cfg, _, err := Load([]string{"--config", writeFile(t, "admission: {classes: {a: {clusterTopPublisher: {threshold: 5}, rate: {limit: 1, per: 1s}}}}")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Admission.Classes["a"]
	if r.ClusterTopPublisher.By != "topic" || r.Rate.By != "user" || r.Rate.Strategy != "gcra" || r.Rate.Scope != "local" {
		t.Errorf("defaults: %+v %+v", r.ClusterTopPublisher, r.Rate)
	}
	cfg, _, err = Load([]string{"--config", writeFile(t, "admission: {classes: {a: {cost: {budget: 1, per: 1s, of: bytes}}}}")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Admission.Classes["a"].Cost; c.By != "user" || c.Scope != "local" {
		t.Errorf("cost defaults: %+v", c)
	}
}

func TestFlagActions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want Action
	}{
		{nil, ActionRun},
		{[]string{"--print-config"}, ActionPrintConfig},
		{[]string{"-print-config", "--listen", ":1"}, ActionPrintConfig},
		{[]string{"--config-reference"}, ActionPrintReference},
		// the reference needs no valid configuration
		{[]string{"--config-reference", "--config", "/does/not/exist"}, ActionPrintReference},
	}
	for _, tt := range tests {
		_, got, err := Load(tt.args, nil)
		if err != nil || got != tt.want {
			t.Errorf("Load(%q) = %v, %v; want %v", tt.args, got, err, tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help"} {
		if _, _, err := Load([]string{arg}, nil); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Load(%s) = %v, want flag.ErrHelp", arg, err)
		}
	}
	var b bytes.Buffer
	newConfigFlags().usage(&b)
	for _, want := range []string{"--config", "-listen", "-redis-url", "-print-config", "-config-reference", "RTSERVER_"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, give, want string }{
		{"two documents", "listen: a:1\n---\nlisten: b:2\n", "want one YAML document"},
		{"syntax", "handshake: {tick: 1s\n", "did not find expected"},
		{"unknown anchor", "listen: *nope\n", "unknown anchor"},
		{"merge of a scalar", "handshake: {<<: 5}\n", "<< wants a mapping"},
		{"too complex", laughs(), "too complex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Load([]string{"--config", writeFile(t, tt.give)}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
			if keys := errorKeys(err); slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "<not") }) {
				t.Errorf("not every error is a KeyError: %v", keys)
			}
		})
	}
}

// laughs is a "billion laughs" document built from merge keys: each level
// merges the previous one ten times.
func laughs() string {
	var b strings.Builder
	b.WriteString("handshake:\n  perIP:\n    l0: &l0 {limit: 1}\n")
	for i := 1; i <= 11; i++ {
		fmt.Fprintf(&b, "    l%d: &l%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	b.WriteString("admission: {classes: {a: {rate: *l11}}}\n")
	return b.String()
}

// ---- --print-config round trip --------------------------------------------

// reload parses YAML() output as a config file on top of the defaults.
func reload(t interface {
	Helper()
	Fatalf(string, ...any)
}, y []byte) rtserver.Config {
	t.Helper()
	got := rtserver.DefaultConfig()
	if err := conf.DecodeYAML(&got, y, "print-config.yaml"); err != nil {
		t.Fatalf("reloading --print-config output: %v\n%s", err, y)
	}
	return got.WithDefaults()
}

func TestPrintConfigRoundTrip(t *testing.T) {
	t.Parallel()
	contract := rtserver.DefaultConfig()
	contract.Admission = contractAdmission()
	odd := rtserver.DefaultConfig()
	odd.Listen = "[::1]:80"
	odd.Redis.ChannelPrefix = "#: '\"\n"
	odd.Auth.JWT.HMACSecret = []byte("yes")
	odd.Pressure.TopicPublishBytesPerSec = 1e300
	odd.Pressure.PublishRatePerSec = 1.5e-9
	odd.Admission.Methods = map[string]string{"<<": "*", "a.*": "&x"}
	tricky := rtserver.DefaultConfig()
	tricky.Handshake.AllowedOrigins = []string{"true", "null", "~", "1", "0x1", "1e3", ".inf", ".NaN", "-", "? x", "- x", "*", "&x",
		"!x", "!!int", "%x", "@x", "`x", "#x", "x #y", "x: y", "<<", "=", "'", "\"", "[", "{", "|", ">", "...", "---", "\ufeffx", "\x00"}
	tricky.Admission.Methods = map[string]string{}
	for i, s := range tricky.Handshake.AllowedOrigins {
		tricky.Admission.Methods[s] = strconv.Itoa(i)
	}
	for name, cfg := range map[string]rtserver.Config{"default": rtserver.DefaultConfig(), "contract": contract, "odd": odd, "tricky": tricky} {
		y, err := conf.EncodeYAML(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := reload(t, y); !sameConfig(got, cfg) {
			t.Errorf("%s: round trip changed the config\n got %+v\nwant %+v\n%s", name, got, cfg, y)
		}
	}
	// Through Load end to end, as an operator would use it.
	y, _ := conf.EncodeYAML(contract)
	got, action, err := Load([]string{"--print-config", "--config", writeFile(t, string(y))}, nil)
	if err != nil || action != ActionPrintConfig || !sameConfig(got, contract) {
		t.Errorf("Load(print-config output) = %v, %v, equal=%v", action, err, sameConfig(got, contract))
	}
	if y, _ := conf.EncodeYAML(rtserver.DefaultConfig()); !strings.Contains(string(y), "topicPublishBytesPerSec: 10485760\n") {
		t.Errorf("floats should print as plain decimals:\n%s", y)
	}
}

// ---- the generated reference ---------------------------------------------

var updateReference = flag.Bool("update-config-reference", false, "rewrite docs/configuration.md")

const referencePath = "../../docs/configuration.md"

func TestConfigReferenceUpToDate(t *testing.T) {
	want := ConfigReference()
	if *updateReference {
		if err := os.MkdirAll(filepath.Dir(referencePath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(referencePath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(referencePath)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("docs/configuration.md is out of date with rtserver.Config (%v); regenerate it with: go generate ./cmd/rtserver", err)
	}
}

func TestConfigReferenceCoversEveryKey(t *testing.T) {
	t.Parallel()
	ref := string(ConfigReference())
	for _, l := range configLeaves {
		if !strings.Contains(ref, "| `"+l.Path+"` |") || !strings.Contains(ref, "`"+l.Env+"`") {
			t.Errorf("reference lacks %s / %s", l.Path, l.Env)
		}
	}
	for _, k := range []string{"reasons", "clusterTopPublisher.threshold", "clusterTopPublisher.by", "rate.limit", "rate.per", "rate.by", "rate.strategy", "rate.scope",
		"cost.budget", "cost.per", "cost.of", "cost.by", "cost.scope", "concurrency.max", "adaptiveConcurrency.min", "adaptiveConcurrency.max"} {
		if !strings.Contains(ref, "| `"+k+"` |") {
			t.Errorf("reference lacks class rule key %s", k)
		}
	}
}

func TestFileAndEnvErrorsTogether(t *testing.T) {
	t.Parallel()
	_, _, err := Load([]string{"--config", writeFile(t, "listn: x\nhandshake: {tick: soon}\n")},
		[]string{"RTSERVER_NOPE=1", "RTSERVER_REDIS_PARTITIONS=many"})
	got := errorKeys(err)
	want := []string{"listn", "handshake.tick", "RTSERVER_NOPE", "redis.partitions"}
	if !slices.Equal(got, want) {
		t.Errorf("keys = %v, want %v (%v)", got, want, err)
	}
}

// sameConfig compares configurations as --print-config shows them: nil and
// empty lists and maps are the same.
func sameConfig(a, b rtserver.Config) bool {
	ya, erra := conf.EncodeYAML(a)
	yb, errb := conf.EncodeYAML(b)
	return erra == nil && errb == nil && bytes.Equal(ya, yb)
}

// A value that fails to decode does not hide an invalid one elsewhere:
// both are reported, each with the FILE:LINE the file gave it; a value an
// environment variable overrode is not placed in the file.
func TestDecodeAndValidationErrorsTogether(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "handshake:\n  tick: fast\nlimits:\n  maxMessageBytes: -1\n  sendQueueBytes: -1\n")
	_, _, err := Load([]string{"--config", file}, []string{"RTSERVER_LIMITS_SENDQUEUEBYTES=-2"})
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		"handshake.tick: want a Go duration such as 10ms or 2s, got \"fast\" (" + file + ":2)",
		"limits.maxMessageBytes: ",
		"limits.sendQueueBytes: ",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q, want it to start %q", i, lines[i], w)
		}
	}
	if !strings.HasSuffix(lines[1], "("+file+":4)") {
		t.Errorf("the file's invalid value is not placed: %q", lines[1])
	}
	if strings.Contains(lines[2], file) {
		t.Errorf("a value from the environment is placed in the file: %q", lines[2])
	}
}
