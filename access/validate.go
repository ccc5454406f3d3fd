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
// a {user} namespace, proxy without a URL and bad proxy settings. A grant
// name is known when it is a built-in; New also knows the application's
// grants (Deps.Grants).
func (cfg Config) Validate() error { return cfg.validate(nil) }

// ValidateWith is Validate knowing the application's grants (deps.Grants),
// as New checks cfg: a rule may name them, and each needs a name, a
// function and no built-in's name.
func (cfg Config) ValidateWith(deps Deps) error { return cfg.validate(deps.Grants) }

// validate is Validate knowing the application's grants, which it checks
// too: each needs a name and a function, and may not shadow a built-in.
func (cfg Config) validate(grants map[string]GrantFunc) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for _, name := range slices.Sorted(maps.Keys(grants)) {
		switch {
		case name == "":
			errs = append(errs, errors.New("access: Deps.Grants: a grant needs a name"))
		case slices.Contains(builtinGrants, name):
			errs = append(errs, fmt.Errorf("access: Deps.Grants[%q]: a built-in grant's name", name))
		case grants[name] == nil:
			errs = append(errs, fmt.Errorf("access: Deps.Grants[%q]: nil GrantFunc", name))
		}
	}
	known := func(name string) bool {
		return slices.Contains(builtinGrants, name) || (name != "" && grants[name] != nil)
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
