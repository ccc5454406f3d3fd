package main

import (
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

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
	// clusterScope checks what a rate or cost part with scope cluster
	// needs, whichever it is.
	clusterScope := func(key, by string) {
		if c.Redis.URL == "" {
			bad(key, "cluster needs redis.url (the shared budget lives in Redis)")
		}
		if by == "conn" {
			bad(key, "cluster cannot be by conn (a connection lives on one instance); use scope local")
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
	positiveDur("http.readHeaderTimeout", c.HTTP.ReadHeaderTimeout)
	positiveDur("http.readTimeout", c.HTTP.ReadTimeout)
	positiveDur("http.idleTimeout", c.HTTP.IdleTimeout)

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
	positiveDur("auth.jwt.refreshNotice", j.RefreshNotice)
	keys := 0
	for _, k := range []string{j.HMACSecret, j.PublicKeyFile, j.JWKSURL} {
		if k != "" {
			keys++
		}
	}
	switch {
	case keys > 1:
		bad("auth.jwt", "set one of hmacSecret, publicKeyFile and jwksUrl, not several")
	case keys == 0 && (j.Audience != "" || j.Issuer != ""):
		bad("auth.jwt", "audience and issuer need a key: set hmacSecret, publicKeyFile or jwksUrl")
	case j.JWKSURL != "":
		if u, err := url.Parse(j.JWKSURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("auth.jwt.jwksUrl", "want an http(s) URL, got %q", j.JWKSURL)
		}
	case j.PublicKeyFile != "":
		if data, err := os.ReadFile(j.PublicKeyFile); err != nil {
			bad("auth.jwt.publicKeyFile", "%v", err)
		} else if b, _ := pem.Decode(data); b == nil {
			bad("auth.jwt.publicKeyFile", "%s holds no PEM block", j.PublicKeyFile)
		}
	}

	tp := &c.Topics.Proxy
	positiveDur("topics.proxy.timeout", tp.Timeout)
	nonNegativeDur("topics.proxy.cacheTTL", tp.CacheTTL)
	oneOf("topics.proxy.fail", tp.Fail, "open", "closed")
	errs = append(errs, c.Topics.validate()...)

	l := &c.Limits
	positive("limits.maxMessageBytes", l.MaxMessageBytes)
	positive("limits.maxSubscriptionsPerConn", int64(l.MaxSubscriptionsPerConn))
	positive("limits.sendQueueBytes", l.SendQueueBytes)
	positiveDur("limits.writeTimeout", l.WriteTimeout)
	positiveDur("limits.pingInterval", l.PingInterval)
	positive("limits.maxJSONDepth", int64(l.MaxJSONDepth))

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
	positiveDur("publishRate.maxClockSkew", pr.MaxClockSkew)

	a := &c.Admission
	oneOf("admission.failPolicy", a.FailPolicy, "open", "closed")
	for _, name := range slices.Sorted(maps.Keys(a.Classes)) {
		r := a.Classes[name]
		key := "admission.classes." + name
		if name == "" || !utf8.ValidString(name) {
			bad(key, "class name must be non-empty UTF-8 text")
		}
		if len(r.Reasons) == 0 && r.ClusterTopPublisher == nil && r.Rate == nil && r.Cost == nil && r.Concurrency == nil && r.AdaptiveConcurrency == nil {
			bad(key, "a rule needs at least one of reasons, clusterTopPublisher, rate, cost, concurrency, adaptiveConcurrency")
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
			oneOf(key+".rate.strategy", rt.Strategy, "gcra", "slidingWindow")
			oneOf(key+".rate.scope", rt.Scope, "local", "cluster")
			if rt.Scope == "cluster" {
				if rt.Strategy == "slidingWindow" {
					bad(key+".rate.scope", "cluster supports strategy gcra only (a sliding window is per instance)")
				}
				clusterScope(key+".rate.scope", rt.By)
			}
		}
		if ct := r.Cost; ct != nil {
			if ct.Budget < 1 || ct.Budget > math.MaxInt32 {
				bad(key+".cost.budget", "must be in [1, %d], got %d", math.MaxInt32, ct.Budget)
			}
			positiveDur(key+".cost.per", ct.Per)
			if name, isParam := strings.CutPrefix(ct.Of, "param:"); !(ct.Of == "bytes" || ct.Of == "fanout" || (isParam && name != "")) {
				bad(key+".cost.of", "must be bytes, fanout or param:<name>, got %q", ct.Of)
			}
			oneOf(key+".cost.by", ct.By, "user", "conn", "ip")
			oneOf(key+".cost.scope", ct.Scope, "local", "cluster")
			if ct.Scope == "cluster" {
				clusterScope(key+".cost.scope", ct.By)
				if rt := r.Rate; rt != nil && rt.Scope == "cluster" && rt.By != ct.By {
					bad(key+".cost.by", "must equal rate.by (%q) when both are scope cluster: they share one key and one round trip", rt.By)
				}
			}
		}
		if ac := r.AdaptiveConcurrency; ac != nil {
			positive(key+".adaptiveConcurrency.min", int64(ac.Min))
			if ac.Max < ac.Min || ac.Max < 1 {
				bad(key+".adaptiveConcurrency.max", "must be at least min (%d), got %d", ac.Min, ac.Max)
			}
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

	if k := c.API.Key; k != "" && !headerToken(k) {
		bad("api.key", "must be printable ASCII without spaces (it travels in an HTTP header)")
	}

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

// headerToken reports whether s is printable ASCII without spaces.
func headerToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
