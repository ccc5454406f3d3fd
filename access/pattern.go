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
	glob           glob // the whole pattern when !hasUser
	prefix, suffix glob
	hasUser        bool
}

// glob is a path.Match pattern with its literal head split off: most
// namespace patterns are a literal ("news") or a literal and a star
// ("chat:*"), which need no call to path.Match at all.
type glob struct {
	pat  string
	head int // bytes before the first of *?[\
}

func newGlob(p string) glob {
	head := strings.IndexAny(p, `*?[\`)
	if head < 0 {
		head = len(p)
	}
	return glob{pat: p, head: head}
}

// match is path.Match(g.pat, s) for a valid pattern.
func (g glob) match(s string) bool {
	lit := g.pat[:g.head]
	return strings.HasPrefix(s, lit) && matchTail(g.pat[g.head:], s[len(lit):])
}

// matchTail is path.Match(tail, rest) for the part of a valid pattern
// from its first of *?[\ on, after the literal head matched.
func matchTail(tail, rest string) bool {
	switch tail {
	case "":
		return rest == ""
	case "*":
		return strings.IndexByte(rest, '/') < 0
	}
	ok, _ := path.Match(tail, rest)
	return ok
}

// matchGlob is path.Match(pattern, s) for a valid pattern, without the
// call when the literal head already decides (the claim grant's globs,
// which are not compiled: it compares while it looks for the head's end,
// so a glob for another topic fails at the first differing byte).
func matchGlob(pattern, s string) bool {
	i := 0
	for ; i < len(pattern); i++ {
		c := pattern[i]
		if c == '*' || c == '?' || c == '[' || c == '\\' {
			break
		}
		if i >= len(s) || s[i] != c {
			return false
		}
	}
	return matchTail(pattern[i:], s[i:])
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
		return pattern{glob: newGlob(s)}, nil
	}
	return pattern{prefix: newGlob(before), suffix: newGlob(after), hasUser: true}, nil
}

func (p *pattern) match(topic, user string) bool {
	if !p.hasUser {
		return p.glob.match(topic)
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
		if p.prefix.match(topic[:at]) && p.suffix.match(topic[at+len(user):]) {
			return true
		}
		from = at + 1
	}
	return false
}

// matchShape reports whether topic has the pattern's shape: a pattern
// without {user} matches as match does; with one, {user} stands for any
// one non-empty run of topic characters without '/'.
func (p *pattern) matchShape(topic string) bool {
	if !p.hasUser {
		return p.glob.match(topic)
	}
	for at := 0; at < len(topic); at++ {
		if !p.prefix.match(topic[:at]) {
			continue
		}
		for end := at + 1; end <= len(topic) && topic[end-1] != '/'; end++ {
			if p.suffix.match(topic[end:]) {
				return true
			}
		}
	}
	return false
}
