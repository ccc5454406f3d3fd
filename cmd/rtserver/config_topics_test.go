package main

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rtserver/rtserver/access"
)

func TestTopicsConfig(t *testing.T) {
	t.Parallel()
	file := `topics:
  namespaces:
    - pattern: "user:{user}"
      subscribe: [owner]
      publish: []
    - {pattern: "chat:*", subscribe: [authenticated], publish: [claim, proxy]}
  default: {publish: [authenticated]}
  proxy: {url: "http://127.0.0.1:9/grant", cacheTTL: 5s, fail: open}
`
	cfg, _, err := Load([]string{"--config", writeFile(t, file)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []NamespaceConfig{
		{Pattern: "user:{user}", Subscribe: []string{"owner"}},
		{Pattern: "chat:*", Subscribe: []string{"authenticated"}, Publish: []string{"claim", "proxy"}},
	}
	if !reflect.DeepEqual(cfg.Topics.Namespaces, want) {
		t.Errorf("namespaces = %+v", cfg.Topics.Namespaces)
	}
	// A section given in part keeps the other keys' defaults.
	if !slices.Equal(cfg.Topics.Default.Subscribe, []string{"any"}) || !slices.Equal(cfg.Topics.Default.Publish, []string{"authenticated"}) {
		t.Errorf("default = %+v", cfg.Topics.Default)
	}
	ac := cfg.Topics.accessConfig()
	if ac.Proxy.URL != "http://127.0.0.1:9/grant" || ac.Proxy.Timeout != time.Second || ac.Proxy.CacheTTL != 5*time.Second || !ac.Proxy.FailOpen {
		t.Errorf("proxy = %+v", ac.Proxy)
	}
	if len(ac.Namespaces) != 2 || ac.Default == nil || ac.Default.Subscribe[0] != "any" {
		t.Errorf("access config = %+v", ac)
	}
	if _, err := access.New(ac, nil, nil); err != nil {
		t.Errorf("access.New: %v", err)
	}

	// The environment takes the list as one YAML flow value.
	cfg, _, err = Load(nil, []string{`RTSERVER_TOPICS_NAMESPACES=[{pattern: "news:*", subscribe: [any]}]`, "RTSERVER_TOPICS_DEFAULT_PUBLISH="})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Topics.Namespaces, []NamespaceConfig{{Pattern: "news:*", Subscribe: []string{"any"}}}) || cfg.Topics.Default.Publish != nil {
		t.Errorf("from the environment: %+v", cfg.Topics)
	}
}

func TestTopicsConfigErrorsNameTheirKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file string
		env        []string
		want       []string
	}{
		{name: "invalid glob", file: "topics:\n  namespaces:\n    - {pattern: a, subscribe: [any]}\n    - {pattern: b}\n    - {pattern: \"chat:[\", subscribe: [any]}\n",
			want: []string{"topics.namespaces[2].pattern"}},
		{name: "unknown grant", file: "topics:\n  namespaces:\n    - {pattern: a, publish: [any, everybody]}\n", want: []string{"topics.namespaces[0].publish[1]"}},
		{name: "owner without user", file: "topics:\n  namespaces:\n    - {pattern: \"a:*\", subscribe: [owner]}\n", want: []string{"topics.namespaces[0].subscribe[0]"}},
		{name: "user twice", file: "topics:\n  namespaces:\n    - {pattern: \"{user}:{user}\"}\n", want: []string{"topics.namespaces[0].pattern"}},
		{name: "owner in default", file: "topics:\n  default: {subscribe: [owner]}\n", want: []string{"topics.default.subscribe[0]"}},
		{name: "proxy without url", file: "topics:\n  default: {publish: [proxy]}\n", want: []string{"topics.default.publish[0]"}},
		{name: "unknown key in a namespace", file: "topics:\n  namespaces:\n    - {patern: a}\n", want: []string{"topics.namespaces[0].patern"}},
		{name: "namespaces not a list", file: "topics:\n  namespaces: {pattern: a}\n", want: []string{"topics.namespaces"}},
		{name: "namespace not a mapping", file: "topics:\n  namespaces: [a]\n", want: []string{"topics.namespaces[0]"}},
		{name: "proxy settings", file: "topics:\n  proxy: {url: \"ftp://x\", timeout: 0s, cacheTTL: -1s, fail: maybe}\n",
			want: []string{"topics.proxy.timeout", "topics.proxy.cacheTTL", "topics.proxy.fail", "topics.proxy.url"}},
		{name: "bad glob from the environment", env: []string{`RTSERVER_TOPICS_NAMESPACES=[{pattern: "[", subscribe: [any]}]`}, want: []string{"topics.namespaces[0].pattern"}},
		{name: "not a list in the environment", env: []string{`RTSERVER_TOPICS_NAMESPACES=[{`}, want: []string{"topics.namespaces"}},
	}
	for _, tt := range tests {
		var args []string
		if tt.file != "" {
			args = []string{"--config", writeFile(t, tt.file)}
		}
		_, _, err := Load(args, tt.env)
		if got := errorKeys(err); !slices.Equal(got, tt.want) {
			t.Errorf("%s: keys %v, want %v (%v)", tt.name, got, tt.want, err)
		}
	}
}
