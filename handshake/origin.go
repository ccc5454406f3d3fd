package handshake

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// originPolicy decides the Origin check (docs/handshake.md, step 3).
//
// A pattern is a path.Match glob, compared case-insensitively:
//   - without "://" it is matched against the Origin's host[:port]
//     ("*.example.com", "localhost:*");
//   - with "://" against scheme://host[:port] ("https://*.example.com").
//
// "*" matches any run of characters (a host has no '/'), so "*.example.com"
// also matches "a.b.example.com" but not "example.com" itself, and a host
// with an explicit port matches only a pattern with a port. A request
// whose Origin host equals its Host header is always allowed (same origin
// is never a cross-site request); with no patterns that is the only
// allowed origin. An absent Origin is allowed only with allowNoOrigin;
// several Origin headers, or one that is not scheme://host (e.g. "null"),
// never are.
type originPolicy struct {
	hostPatterns   []string
	originPatterns []string
	allowNoOrigin  bool
}

func newOriginPolicy(patterns []string, allowNoOrigin bool) (originPolicy, error) {
	p := originPolicy{allowNoOrigin: allowNoOrigin}
	for _, pat := range patterns {
		lp := strings.ToLower(strings.TrimSpace(pat))
		if _, err := path.Match(lp, ""); err != nil || lp == "" {
			return p, fmt.Errorf("handshake: allowedOrigins: bad pattern %q", pat)
		}
		if strings.Contains(lp, "://") {
			p.originPatterns = append(p.originPatterns, lp)
		} else {
			p.hostPatterns = append(p.hostPatterns, lp)
		}
	}
	return p, nil
}

func (p *originPolicy) allowed(r *http.Request) bool {
	vals := r.Header["Origin"]
	switch len(vals) {
	case 0:
		return p.allowNoOrigin
	case 1:
	default:
		return false
	}
	origin := vals[0]
	i := strings.Index(origin, "://")
	if i <= 0 || i+3 == len(origin) {
		return false
	}
	host := origin[i+3:]
	for j := 0; j < len(host); j++ {
		switch host[j] {
		case '/', '?', '#', '@', ' ', '\\':
			return false // a path, a query, userinfo: not a bare origin
		}
	}
	if host == r.Host || strings.EqualFold(host, r.Host) {
		return true
	}
	if len(p.hostPatterns) > 0 {
		lh := strings.ToLower(host) // no allocation when already lower case
		for _, pat := range p.hostPatterns {
			if ok, _ := path.Match(pat, lh); ok {
				return true
			}
		}
	}
	if len(p.originPatterns) > 0 {
		lo := strings.ToLower(origin)
		for _, pat := range p.originPatterns {
			if ok, _ := path.Match(pat, lo); ok {
				return true
			}
		}
	}
	return false
}

// originRefusal is the 403's body: which origin was refused and which key
// decides, so that whoever set up the page can fix the config. The origin
// is the client's own header, quoted and cut short, never markup.
func originRefusal(origin string) string {
	if origin == "" {
		return "no Origin header, and handshake.allowNoOrigin is false\n"
	}
	if len(origin) > 200 {
		origin = origin[:200] + "..."
	}
	return fmt.Sprintf("origin %q is not in handshake.allowedOrigins\n", origin)
}
