package access

import (
	"errors"
	"fmt"
	"github.com/rtserver/rtserver/internal/conf"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// ConfigError is one invalid key of a configuration: Key is its path in
// docs/configuration.md (topics.namespaces[2].pattern).
type ConfigError = conf.KeyError

// Validate reports every problem of cfg at once (errors.Join of
// *ConfigError), or nil: bad patterns, unknown grant names, owner outside
// a {user} namespace, proxy without a URL, bad proxy settings, and
// application grants that are nil or shadow a built-in.
func (cfg Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Grants)) {
		key := "topics.grants." + name
		switch {
		case name == "":
			bad(key, "a grant needs a name")
		case slices.Contains(builtinGrants, name):
			bad(key, "%q is a built-in grant", name)
		case cfg.Grants[name] == nil:
			bad(key, "nil GrantFunc")
		}
	}
	known := func(name string) bool {
		return slices.Contains(builtinGrants, name) || (name != "" && cfg.Grants[name] != nil)
	}
	checkRule := func(key string, r Rule, hasUser bool) {
		if err := r.History.Validate(key + ".history"); err != nil {
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = append(errs, j.Unwrap()...)
			}
		}
		for _, side := range []struct {
			name  string
			names []string
		}{{"subscribe", r.Subscribe}, {"publish", r.Publish}} {
			for i, g := range side.names {
				k := fmt.Sprintf("%s.%s[%d]", key, side.name, i)
				switch {
				case !known(g):
					bad(k, "unknown grant %q (want %s, or a grant registered by the application)", g, strings.Join(builtinGrants, ", "))
				case g == GrantOwner && !hasUser:
					bad(k, "owner needs a namespace pattern holding {user}")
				case g == GrantProxy && cfg.Proxy.URL == "":
					bad(k, "proxy needs topics.proxy.url")
				}
			}
		}
	}
	for i, n := range cfg.Namespaces {
		key := fmt.Sprintf("topics.namespaces[%d]", i)
		p, err := compilePattern(n.Pattern)
		if err != nil {
			bad(key+".pattern", "%v: %q", err, n.Pattern)
		}
		checkRule(key, n.Rule, p.hasUser)
	}
	if cfg.Default != nil {
		checkRule("topics.default", *cfg.Default, false)
	}
	pr := cfg.Proxy
	if pr.URL != "" {
		if u, err := url.Parse(pr.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("topics.proxy.url", "must be an http:// or https:// URL with a host, got %q", pr.URL)
		}
	}
	switch {
	case pr.URL != "" && pr.Timeout <= 0:
		bad("topics.proxy.timeout", "must be a positive duration when topics.proxy.url is set, got %s", pr.Timeout)
	case pr.Timeout < 0:
		bad("topics.proxy.timeout", "must not be negative, got %s", pr.Timeout)
	}
	if pr.Fail != FailClosed && pr.Fail != FailOpen {
		bad("topics.proxy.fail", "must be open or closed, got %d", int(pr.Fail))
	}
	if pr.CacheTTL < 0 {
		bad("topics.proxy.cacheTTL", "must not be negative, got %s", pr.CacheTTL)
	}
	return errors.Join(errs...)
}
