package main

import (
	"net/url"
	"reflect"
	"slices"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/conf"
)

// Secrets in --print-config: its output ends up in terminals, tickets and
// CI logs, so the keys that let their holder mint tokens, call the server
// API or forge bus messages print as redactedMark unless --show-secrets
// asks for them. A redacted output loaded back as a file is refused (the
// mark is not a secret anyone meant), never run with the mark as the key.

// secretKeys are the keys --print-config redacts (when set).
var secretKeys = []string{"redis.sentinel.password", "auth.jwt.hmacSecret", "publishRate.hmacSecret", "api.key"}

// redactedMark stands for a secret in --print-config's output.
const redactedMark = "REDACTED"

// redactSecrets returns cfg with every set secret replaced by
// redactedMark, and the password of redis.url too.
func redactSecrets(cfg rtserver.Config) rtserver.Config {
	v := reflect.ValueOf(&cfg).Elem()
	for _, l := range configLeaves {
		if !slices.Contains(secretKeys, l.Path) {
			continue
		}
		f := conf.ValueAt(v, l)
		if f.Len() == 0 {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(redactedMark)
		case reflect.Slice: // []byte
			f.SetBytes([]byte(redactedMark))
		}
	}
	// The map and slice fields are shared with the caller's cfg; only the
	// values set above were replaced, in this copy's own fields.
	if u, err := url.Parse(cfg.Redis.URL); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redactedMark)
			cfg.Redis.URL = u.String()
		}
	}
	return cfg
}

// redactedSecrets refuses a configuration whose secret is the redaction
// mark: a redacted --print-config output loaded back as a file.
func redactedSecrets(cfg rtserver.Config) error {
	v := reflect.ValueOf(cfg)
	var p conf.Problems
	for _, l := range configLeaves {
		if !slices.Contains(secretKeys, l.Path) {
			continue
		}
		f := conf.ValueAt(v, l)
		var s string
		if f.Kind() == reflect.String {
			s = f.String()
		} else {
			s = string(f.Bytes())
		}
		if s == redactedMark {
			p.Add(l.Path, "is %s, the mark --print-config prints for a secret: set the secret itself (rtserver --print-config --show-secrets prints it)", redactedMark)
		}
	}
	if u, err := url.Parse(cfg.Redis.URL); err == nil && u.User != nil {
		if pw, _ := u.User.Password(); pw == redactedMark {
			p.Add("redis.url", "has the password %s, the mark --print-config prints for a secret: set the password itself", redactedMark)
		}
	}
	return p.Err()
}
