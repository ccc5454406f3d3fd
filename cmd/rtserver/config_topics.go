package main

import (
	"errors"
	"time"

	"github.com/rtserver/rtserver/access"
)

// accessConfig maps topics.* onto the library's access.Config. Durations
// that Validate refuses as negative are passed as 0, so the access
// package does not report them a second time.
func (t TopicsConfig) accessConfig() access.Config {
	var cfg access.Config
	for _, n := range t.Namespaces {
		cfg.Namespaces = append(cfg.Namespaces, access.Namespace{
			Pattern: n.Pattern,
			Rule:    access.Rule{Subscribe: n.Subscribe, Publish: n.Publish},
		})
	}
	cfg.Default = &access.Rule{Subscribe: t.Default.Subscribe, Publish: t.Default.Publish}
	cfg.Proxy = access.Proxy{
		URL:      t.Proxy.URL,
		Timeout:  max(time.Duration(t.Proxy.Timeout), 0),
		CacheTTL: max(time.Duration(t.Proxy.CacheTTL), 0),
		FailOpen: t.Proxy.Fail == "open",
	}
	return cfg
}

// validate checks topics.* (patterns, grant words, {user} use, the
// proxy URL) with the access package's own rules, as KeyErrors.
func (t TopicsConfig) validate() []error {
	err := access.Validate(t.accessConfig())
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if ce, ok := errors.AsType[*access.ConfigError](e); ok {
			out = append(out, &KeyError{Key: ce.Key, Msg: ce.Msg})
		} else {
			out = append(out, &KeyError{Key: "topics", Msg: e.Error()})
		}
	}
	return out
}
