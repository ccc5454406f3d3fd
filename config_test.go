package rtserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/internal/conf"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/pressure"
)

// configFrom is DefaultConfig with a YAML document on top, as the binary
// loads a file.
func configFrom(t *testing.T, yaml string) rtserver.Config {
	t.Helper()
	cfg := rtserver.DefaultConfig()
	if err := conf.DecodeYAML(&cfg, []byte(yaml), "test.yaml"); err != nil {
		t.Fatalf("decoding %q: %v", yaml, err)
	}
	return cfg
}

// errorKeys lists the Key of every ConfigError in err.
func errorKeys(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if ke, ok := e.(*rtserver.ConfigError); ok {
			keys = append(keys, ke.Key)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		keys = append(keys, "<not a ConfigError: "+e.Error()+">")
	}
	walk(err)
	return keys
}

// TestConfigValidateNamesKeys: every invalid value is refused with an
// error naming its key.
func TestConfigValidateNamesKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "key.txt")
	if err := os.WriteFile(notPEM, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give    string
		wantKey string
	}{
		{give: "listen: nonsense", wantKey: "listen"},
		{give: "adminListen: nonsense", wantKey: "adminListen"},
		{give: "redis: {url: http://x}", wantKey: "redis.url"},
		{give: "redis: {bus: cluster}", wantKey: "redis.bus"},
		{give: "handshake: {maxConnections: -1}", wantKey: "handshake.maxConnections"},
		{give: "handshake: {maxConcurrent: -1}", wantKey: "handshake.maxConcurrent"},
		{give: "handshake: {perTickBudget: -1}", wantKey: "handshake.perTickBudget"},
		{give: "handshake: {perTickBudget: 5, tick: 0s}", wantKey: "handshake.tick"},
		{give: "handshake: {perTickBudget: 0, tick: -1s}", wantKey: "handshake.tick"},
		{give: "handshake: {maxQueueWait: -1s}", wantKey: "handshake.maxQueueWait"},
		{give: "handshake: {perIP: {limit: -1}}", wantKey: "handshake.perIP.limit"},
		{give: "handshake: {perIP: {limit: 5, per: 0s}}", wantKey: "handshake.perIP.per"},
		{give: "handshake: {allowedOrigins: ['https://[a']}", wantKey: "handshake.allowedOrigins[0]"},
		{give: "handshake: {allowedOrigins: ['']}", wantKey: "handshake.allowedOrigins[0]"},
		{give: "auth: {jwt: {publicKeyFile: " + filepath.Join(dir, "missing.pem") + "}}", wantKey: "auth.jwt.publicKeyFile"},
		{give: "auth: {jwt: {publicKeyFile: " + notPEM + "}}", wantKey: "auth.jwt.publicKeyFile"},
		{give: "auth: {jwt: {audience: rt}}", wantKey: "auth.jwt"},
		{give: "auth: {jwt: {issuer: idp}}", wantKey: "auth.jwt"},
		{give: "auth: {jwt: {jwksUrl: 'ftp://idp.example/jwks'}}", wantKey: "auth.jwt.jwksUrl"},
		{give: "auth: {jwt: {jwksUrl: '/jwks'}}", wantKey: "auth.jwt.jwksUrl"},
		{give: "limits: {maxSubscriptionsPerConn: -5}", wantKey: "limits.maxSubscriptionsPerConn"},
		{give: "limits: {sendQueueBytes: -1}", wantKey: "limits.sendQueueBytes"},
		{give: "limits: {pingInterval: -1s}", wantKey: "limits.pingInterval"},
		{give: "http: {readTimeout: -1s}", wantKey: "http.readTimeout"},
		{give: "pressure: {memoryHeapUsedRatio: 1.5}", wantKey: "pressure.memoryHeapUsedRatio"},
		{give: "pressure: {memoryHeapUsedRatio: -0.1}", wantKey: "pressure.memoryHeapUsedRatio"},
		{give: "pressure: {memoryHeapUsedRatio: .nan}", wantKey: "pressure.memoryHeapUsedRatio"},
		{give: "pressure: {publishRatePerSec: -1}", wantKey: "pressure.publishRatePerSec"},
		{give: "pressure: {subscriberRatio: .inf}", wantKey: "pressure.subscriberRatio"},
		{give: "pressure: {topicPublishRatePerSec: -1}", wantKey: "pressure.topicPublishRatePerSec"},
		{give: "pressure: {topicPublishBytesPerSec: .nan}", wantKey: "pressure.topicPublishBytesPerSec"},
		{give: "publishRate: {publishInterval: 5s, staleAfter: 4s}", wantKey: "publishRate.staleAfter"},
		{give: "publishRate: {topN: -1}", wantKey: "publishRate.topN"},
		{give: "pressure: {sampleInterval: -1s}", wantKey: "pressure.sampleInterval"},
		{give: "pressure: {topN: -1}", wantKey: "pressure.topN"},
		{give: "rpc: {proxy: {timeout: -1s}}", wantKey: "rpc.proxy.timeout"},
		{give: "admission: {classes: {a: {}}}", wantKey: "admission.classes.a"},
		{give: "admission: {classes: {a: ~}}", wantKey: "admission.classes.a"},
		{give: "admission: {classes: {'': {reasons: [MEMORY]}}}", wantKey: "admission.classes."},
		{give: "limits: {maxMessageBytes: -5}", wantKey: "limits.maxMessageBytes"},
		{give: "topics: {proxy: {url: 'http://backend/grant', timeout: 0s}}", wantKey: "topics.proxy.timeout"},
		{give: "handshake: {tick: -1s}", wantKey: "handshake.tick"},
		{give: "handshake: {perIP: {limit: 1, per: -1s}}", wantKey: "handshake.perIP.per"},
		{give: "admission: {classes: {a: {clusterTopPublisher: {threshold: 0}}}}", wantKey: "admission.classes.a.clusterTopPublisher.threshold"},
		{give: "admission: {classes: {a: {clusterTopPublisher: {threshold: 1, by: conn}}}}", wantKey: "admission.classes.a.clusterTopPublisher.by"},
		{give: "admission: {classes: {a: {rate: {limit: 0, per: 1s}}}}", wantKey: "admission.classes.a.rate.limit"},
		{give: "admission: {classes: {a: {rate: {limit: 1, per: 0s}}}}", wantKey: "admission.classes.a.rate.per"},
		{give: "admission: {classes: {a: {rate: {limit: 1, per: 1s, by: topic}}}}", wantKey: "admission.classes.a.rate.by"},
		{give: "admission: {classes: {a: {rate: {limit: 1, per: 1s, strategy: leaky}}}}", wantKey: "admission.classes.a.rate.strategy"},
		{give: "admission: {classes: {a: {rate: {limit: 1, per: 1s, scope: global}}}}", wantKey: "admission.classes.a.rate.scope"},
		{give: "admission: {classes: {a: {rate: {limit: 1, per: 1s, scope: cluster}}}}", wantKey: "admission.classes.a.rate.scope"},
		{give: "redis: {url: 'redis://x'}\nadmission: {classes: {a: {rate: {limit: 1, per: 1s, scope: cluster, strategy: slidingWindow}}}}", wantKey: "admission.classes.a.rate.scope"},
		{give: "redis: {url: 'redis://x'}\nadmission: {classes: {a: {rate: {limit: 1, per: 1s, scope: cluster, by: conn}}}}", wantKey: "admission.classes.a.rate.scope"},
		{give: "redis: {url: 'redis://x'}\nadmission: {classes: {a: {cost: {budget: 1, per: 1s, of: bytes, scope: cluster, by: conn}}}}", wantKey: "admission.classes.a.cost.scope"},
		{give: "admission: {classes: {a: {cost: {budget: 0, per: 1s, of: bytes}}}}", wantKey: "admission.classes.a.cost.budget"},
		{give: "admission: {classes: {a: {cost: {budget: 3000000000, per: 1s, of: bytes}}}}", wantKey: "admission.classes.a.cost.budget"},
		{give: "admission: {classes: {a: {cost: {budget: 1, per: 0s, of: bytes}}}}", wantKey: "admission.classes.a.cost.per"},
		{give: "admission: {classes: {a: {cost: {budget: 1, per: 1s, of: tokens}}}}", wantKey: "admission.classes.a.cost.of"},
		{give: "admission: {classes: {a: {cost: {budget: 1, per: 1s, of: 'param:'}}}}", wantKey: "admission.classes.a.cost.of"},
		{give: "admission: {classes: {a: {cost: {budget: 1, per: 1s, of: bytes, by: topic}}}}", wantKey: "admission.classes.a.cost.by"},
		{give: "admission: {classes: {a: {cost: {budget: 1, per: 1s, of: bytes, scope: all}}}}", wantKey: "admission.classes.a.cost.scope"},
		{give: "admission: {classes: {a: {cost: {budget: 1, per: 1s, of: bytes, scope: cluster}}}}", wantKey: "admission.classes.a.cost.scope"},
		{give: "redis: {url: 'redis://x'}\nadmission: {classes: {a: {rate: {limit: 1, per: 1s, scope: cluster, by: ip}, cost: {budget: 1, per: 1s, of: bytes, scope: cluster}}}}", wantKey: "admission.classes.a.cost.by"},
		{give: "admission: {classes: {a: {adaptiveConcurrency: {min: 0, max: 4}}}}", wantKey: "admission.classes.a.adaptiveConcurrency.min"},
		{give: "admission: {classes: {a: {adaptiveConcurrency: {min: 5, max: 4}}}}", wantKey: "admission.classes.a.adaptiveConcurrency.max"},
		{give: "admission: {classes: {a: {concurrency: {max: 0}}}}", wantKey: "admission.classes.a.concurrency.max"},
		{give: "admission: {methods: {publish: missing}}", wantKey: "admission.methods.publish"},
		{give: "admission: {classes: {a: {reasons: [MEMORY]}}, methods: {'[x': a}}", wantKey: "admission.methods.[x"},
		{give: "rpc: {proxy: {url: 'ftp://x'}}", wantKey: "rpc.proxy.url"},
		{give: "rpc: {proxy: {url: 'http://'}}", wantKey: "rpc.proxy.url"},
		{give: "api: {key: 'has space'}", wantKey: "api.key"},
		{give: "api: {key: \"tab\\there\"}", wantKey: "api.key"},
		{give: "drain: {duration: -1s}", wantKey: "drain.duration"},
		{give: "metrics: {namespace: 'my-app'}", wantKey: "metrics.namespace"},
		{give: "log: {format: xml}", wantKey: "log.format"},
	}
	for _, tt := range tests {
		t.Run(tt.wantKey+"/"+tt.give, func(t *testing.T) {
			t.Parallel()
			err := configFrom(t, tt.give).Validate()
			if keys := errorKeys(err); !slices.Contains(keys, tt.wantKey) {
				t.Errorf("error %q names keys %q, want %q", err, keys, tt.wantKey)
			}
			if !strings.Contains(err.Error(), tt.wantKey+": ") {
				t.Errorf("error %q does not start a line with the key", err)
			}
		})
	}
}

// TestConfigValidateReportsEveryError: one call names every bad key, and
// the defaults and the zero Config are valid.
func TestConfigValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	c := rtserver.DefaultConfig()
	c.Redis.Bus = "x"
	c.Limits.WriteTimeout = -1
	c.Log.Level = "loud"
	got := errorKeys(c.Validate())
	if want := []string{"redis.bus", "limits.writeTimeout", "log.level"}; !slices.Equal(got, want) {
		t.Errorf("keys = %v, want %v", got, want)
	}
	if err := rtserver.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	if err := (rtserver.Config{}).Validate(); err != nil {
		t.Errorf("Config{}.Validate() = %v", err)
	}
}

// publicKeyPEM is the PEM of a new P-256 public key.
func publicKeyPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestConfigValidateAccepts(t *testing.T) {
	t.Parallel()
	pemFile := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(pemFile, publicKeyPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []string{
		"auth: {jwt: {publicKeyFile: " + pemFile + "}}",
		"auth: {jwt: {hmacSecret: s}}",
		"auth: {jwt: {publicKeyFile: " + pemFile + ", jwksUrl: 'https://idp.example/jwks'}}",
		"redis: {url: 'rediss://user:pw@host:6380/2', bus: sharded, partitions: 1}",
		"handshake: {perTickBudget: 0, tick: 0s, maxQueueWait: 0s, perIP: {limit: 0, per: 0s}}",
		"handshake: {trustedProxies: [10.0.0.0/8, 'fd00::/8', 192.168.1.1/32], allowedOrigins: ['https://*.example.com', 'http://localhost:*']}",
		"pressure: {memoryHeapUsedRatio: 0, publishRatePerSec: 0, subscriberRatio: 0, topicPublishRatePerSec: 0, topicPublishBytesPerSec: 0}",
		"pressure: {memoryHeapUsedRatio: 1}",
		"publishRate: {publishInterval: 5s, staleAfter: 5s}",
		"drain: {duration: 0s}",
		"limits: {maxMessageBytes: 0, writeTimeout: 0s}", // 0: the default
		"rpc: {proxy: {url: 'https://backend.internal:8443/rpc'}}",
		"metrics: {namespace: rt_server}",
		"log: {format: json, level: debug}",
		"adminListen: ':9090'",
		"admission: {classes: {llm: {adaptiveConcurrency: {min: 4, max: 128}}, one: {adaptiveConcurrency: {min: 1, max: 1}}}}",
		"admission: {classes: {f: {cost: {budget: 1000000, per: 1m, of: fanout, by: user}}, p: {cost: {budget: 2147483647, per: 1s, of: 'param:maxTokens', by: ip}}}}",
		"admission: {classes: {fair: {rate: {limit: 100, per: 1m, by: user, strategy: slidingWindow}}}}",
		"redis: {url: 'redis://127.0.0.1:6379'}\nadmission: {classes: {g: {rate: {limit: 50, per: 1s, scope: cluster}, cost: {budget: 9, per: 1s, of: bytes, scope: cluster}}}}",
	}
	for _, give := range tests {
		if err := configFrom(t, give).Validate(); err != nil {
			t.Errorf("%q: %v", give, err)
		}
	}
}

// The library refuses what the binary refuses: New reports the key.
func TestNewRefusesInvalidConfig(t *testing.T) {
	t.Parallel()
	cfg := quietConfig()
	cfg.Limits.MaxMessageBytes = -5
	cfg.Topics.Proxy.URL = "http://127.0.0.1:1/grant"
	cfg.Topics.Proxy.Timeout = 0
	_, err := rtserver.New(cfg, rtserver.Deps{})
	var ce *rtserver.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("New = %v, want a ConfigError", err)
	}
	if got := errorKeys(errors.Unwrap(err)); !slices.Equal(got, []string{"topics.proxy.timeout", "limits.maxMessageBytes"}) {
		t.Errorf("keys = %v (%v)", got, err)
	}
}

// An application grant is named in Deps.TopicGrants: Validate, which knows
// only the built-ins, refuses a rule naming it; New and ValidateWith
// accept it, and refuse a rule naming a grant that is not there.
func TestTopicGrantsFromDeps(t *testing.T) {
	t.Parallel()
	cfg := configFrom(t, "topics: {default: {subscribe: [member], publish: [any]}}")
	deps := rtserver.Deps{TopicGrants: map[string]access.GrantFunc{
		"member": func(context.Context, access.Question) (bool, error) { return true, nil },
	}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "topics.default.subscribe[0]") {
		t.Errorf("Validate() = %v, want topics.default.subscribe[0] named", err)
	}
	if err := cfg.ValidateWith(deps); err != nil {
		t.Errorf("ValidateWith(deps) = %v", err)
	}
	if n, err := rtserver.New(cfg, deps); err != nil {
		t.Errorf("New = %v", err)
	} else {
		n.Close()
	}
	if _, err := rtserver.New(cfg, rtserver.Deps{}); err == nil || !strings.Contains(err.Error(), "topics.default.subscribe[0]") {
		t.Errorf("New without the grant = %v, want topics.default.subscribe[0] named", err)
	}
}

// An admission predicate is named by its class in Deps.AdmissionPredicates:
// its class may have no other part, and a predicate whose class is not in
// admission.classes stops New with the key named.
func TestAdmissionPredicatesFromDeps(t *testing.T) {
	t.Parallel()
	cfg := configFrom(t, "admission: {classes: {admin: {}}, methods: {'admin.*': admin}}")
	yes := func(*pressure.Snapshot, *message.Call) (bool, error) { return true, nil }
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted a class with no part and no predicate")
	}
	n, err := rtserver.New(cfg, rtserver.Deps{AdmissionPredicates: map[string]message.Predicate{"admin": yes}})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	n.Close()
	_, err = rtserver.New(cfg, rtserver.Deps{AdmissionPredicates: map[string]message.Predicate{"admin": yes, "ops": yes}})
	if err == nil || !strings.Contains(err.Error(), "admission.classes.ops") {
		t.Errorf("New with a predicate for a missing class = %v, want admission.classes.ops named", err)
	}
}

// A public key held in memory (Deps.JWTPublicKey) is a key for auth.jwt:
// an audience needs one, which Validate alone does not see.
func TestJWTPublicKeyFromDeps(t *testing.T) {
	t.Parallel()
	deps := rtserver.Deps{JWTPublicKey: publicKeyPEM(t)}
	cfg := configFrom(t, "auth: {jwt: {audience: rt}}")
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted an audience without a key")
	}
	n, err := rtserver.New(cfg, deps)
	if err != nil {
		t.Fatalf("New with Deps.JWTPublicKey = %v", err)
	}
	n.Close()
	deps.JWTPublicKey = []byte("not PEM")
	if _, err := rtserver.New(cfg, deps); err == nil {
		t.Error("New accepted a JWTPublicKey that is not PEM")
	}
}
