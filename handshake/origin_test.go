package handshake

import (
	"net/http/httptest"
	"testing"
)

func TestOriginPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		patterns []string
		noOrigin bool
		host     string
		origin   []string // nil: header absent
		want     bool
	}{
		{name: "same host, no patterns", host: "chat.example.com", origin: []string{"https://chat.example.com"}, want: true},
		{name: "same host is case-insensitive", host: "Chat.Example.com", origin: []string{"https://chat.EXAMPLE.com"}, want: true},
		{name: "same host with port", host: "localhost:8080", origin: []string{"http://localhost:8080"}, want: true},
		{name: "other host, no patterns", host: "chat.example.com", origin: []string{"https://evil.example.net"}, want: false},
		{name: "port differs", host: "localhost:8080", origin: []string{"http://localhost:9090"}, want: false},
		{name: "absent origin allowed", host: "h", noOrigin: true, want: true},
		{name: "absent origin refused", host: "h", noOrigin: false, want: false},
		{name: "host glob", patterns: []string{"*.example.com"}, host: "api.internal", origin: []string{"https://app.example.com"}, want: true},
		{name: "host glob spans subdomains", patterns: []string{"*.example.com"}, host: "api.internal", origin: []string{"https://a.b.example.com"}, want: true},
		{name: "host glob does not match the apex", patterns: []string{"*.example.com"}, host: "api.internal", origin: []string{"https://example.com"}, want: false},
		{name: "host glob does not match a suffix trick", patterns: []string{"*.example.com"}, host: "api.internal", origin: []string{"https://example.com.evil.net"}, want: false},
		{name: "host glob ignores scheme", patterns: []string{"*.example.com"}, host: "api.internal", origin: []string{"http://app.example.com"}, want: true},
		{name: "explicit port needs a port pattern", patterns: []string{"*.example.com"}, host: "api.internal", origin: []string{"https://app.example.com:8443"}, want: false},
		{name: "port glob", patterns: []string{"localhost:*"}, host: "api.internal", origin: []string{"http://localhost:3000"}, want: true},
		{name: "origin glob checks scheme", patterns: []string{"https://*.example.com"}, host: "api.internal", origin: []string{"http://app.example.com"}, want: false},
		{name: "origin glob", patterns: []string{"https://*.example.com"}, host: "api.internal", origin: []string{"https://app.example.com"}, want: true},
		{name: "pattern case-insensitive", patterns: []string{"APP.Example.com"}, host: "api.internal", origin: []string{"https://app.example.COM"}, want: true},
		{name: "same host still allowed with patterns", patterns: []string{"other.com"}, host: "api.internal", origin: []string{"https://api.internal"}, want: true},
		{name: "null origin", patterns: []string{"*"}, host: "h", origin: []string{"null"}, want: false},
		{name: "origin with path", patterns: []string{"*"}, host: "h", origin: []string{"https://a.com/x"}, want: false},
		{name: "origin with userinfo", patterns: []string{"*.example.com"}, host: "h", origin: []string{"https://evil.net@a.example.com"}, want: false},
		{name: "two origin headers", host: "h", origin: []string{"https://h", "https://h"}, want: false},
		{name: "empty origin", host: "h", noOrigin: true, origin: []string{""}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := newOriginPolicy(tt.patterns, tt.noOrigin)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/ws", nil)
			r.Host = tt.host
			if tt.origin != nil {
				r.Header["Origin"] = tt.origin
			}
			if got := p.allowed(r); got != tt.want {
				t.Errorf("allowed = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOriginBadPattern(t *testing.T) {
	t.Parallel()
	for _, give := range []string{"[", "", "  "} {
		if _, err := newOriginPolicy([]string{give}, false); err == nil {
			t.Errorf("pattern %q accepted", give)
		}
	}
}

func FuzzOrigin(f *testing.F) {
	for _, s := range []string{"https://a.example.com", "null", "http://[::1]:80", "https://x.example.com:1", "://", "https://"} {
		f.Add(s)
	}
	p, err := newOriginPolicy([]string{"*.example.com", "https://*.example.org"}, false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, origin string) {
		r := httptest.NewRequest("GET", "/ws", nil)
		r.Host = "api.internal"
		r.Header["Origin"] = []string{origin}
		p.allowed(r) // must not panic
	})
}
