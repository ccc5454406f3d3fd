package access

import (
	"errors"
	"path"
	"strings"
)

// userPlaceholder in a namespace pattern matches exactly the connection's
// user.
const userPlaceholder = "{user}"

// pattern is a compiled namespace pattern. Without {user} it is one glob;
// with it, the globs before and after: a topic matches when some
// occurrence of the user in it has a matching prefix before and suffix
// after. Matching allocates nothing.
type pattern struct {
	glob           string // the whole pattern when !hasUser
	prefix, suffix string
	hasUser        bool
}

func compilePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, errors.New("empty pattern")
	}
	before, after, found := strings.Cut(s, userPlaceholder)
	if strings.Contains(after, userPlaceholder) {
		return pattern{}, errors.New("{user} may appear at most once")
	}
	if strings.ContainsAny(before, "{}") || strings.ContainsAny(after, "{}") {
		return pattern{}, errors.New("braces are only allowed in {user} (topics never contain them)")
	}
	for _, g := range []string{before, after} {
		if _, err := path.Match(g, ""); err != nil {
			return pattern{}, errors.New("bad glob (path.Match syntax)")
		}
	}
	if !found {
		return pattern{glob: s}, nil
	}
	return pattern{prefix: before, suffix: after, hasUser: true}, nil
}

func (p *pattern) match(topic, user string) bool {
	if !p.hasUser {
		ok, _ := path.Match(p.glob, topic)
		return ok
	}
	if user == "" {
		return false
	}
	for from := 0; from+len(user) <= len(topic); {
		i := strings.Index(topic[from:], user)
		if i < 0 {
			return false
		}
		at := from + i
		if ok, _ := path.Match(p.prefix, topic[:at]); ok {
			if ok, _ := path.Match(p.suffix, topic[at+len(user):]); ok {
				return true
			}
		}
		from = at + 1
	}
	return false
}
