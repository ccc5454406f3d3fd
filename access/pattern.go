package access

import (
	"errors"
	"path"
	"strings"
)

// userPlaceholder in a namespace pattern stands for one user's part of a
// topic (docs/access-control.md, "{user} patterns").
const userPlaceholder = "{user}"

// pattern is a compiled namespace pattern. Which topics it decides does
// not depend on who asks: without {user} that is its glob; with it, its
// shape, the glob with {user} read as one or more characters other than
// '/'. For a {user} pattern, owner names the one user a topic of that
// shape belongs to, if any. Matching allocates nothing.
type pattern struct {
	glob    glob // the whole pattern, or the shape of a {user} pattern
	hasUser bool

	// A {user} pattern split at {user}, and its separators: the literal
	// characters right before and after {user} (0 at an end of the
	// pattern). A user's part of a topic never holds a separator or '/',
	// so it ends at the first separator after it: at most one run of a
	// topic fits each place it may start.
	prefix, suffix glob
	sepBefore      byte
	sepAfter       byte

	// bySplit: the shape holds a character class, which (unlike * and ?)
	// may match '/'. path.Match places each chunk at its leftmost fit,
	// which is only exact when no chunk can match '/', so such a shape is
	// matched by trying each place {user}'s run may take instead.
	bySplit bool
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

// literal reports whether the glob matches exactly its own text.
func (g glob) literal() bool { return g.head == len(g.pat) }

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
	case "?*": // the shape of a pattern ending in {user}
		return rest != "" && strings.IndexByte(rest, '/') < 0
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

var errUserNextToGlob = errors.New("{user} must be next to a literal character or an end of the pattern (user:{user}, room-{user}-inbox), not next to *, ? or [...]: a user's part of a topic would have no end")

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
	p := pattern{
		glob:    newGlob(before + "?*" + after), // one or more characters but '/'
		hasUser: true,
		prefix:  newGlob(before),
		suffix:  newGlob(after),
		bySplit: strings.Contains(before+after, "["),
	}
	var ok bool
	if before != "" {
		if p.sepBefore, ok = lastLiteral(before); !ok {
			return pattern{}, errUserNextToGlob
		}
	}
	if after != "" {
		if p.sepAfter, ok = firstLiteral(after); !ok {
			return pattern{}, errUserNextToGlob
		}
	}
	return p, nil
}

// firstLiteral is the character a valid glob's first element matches,
// when that element is a literal (possibly escaped).
func firstLiteral(g string) (byte, bool) {
	switch g[0] {
	case '*', '?', '[':
		return 0, false
	case '\\':
		return g[1], true // a valid glob does not end in a lone '\'
	}
	return g[0], true
}

// lastLiteral is the character a valid glob's last element matches, when
// that element is a literal (possibly escaped).
func lastLiteral(g string) (lit byte, ok bool) {
	for i := 0; i < len(g); {
		switch g[i] {
		case '\\':
			lit, ok = g[i+1], true
			i += 2
		case '*', '?':
			lit, ok = 0, false
			i++
		case '[':
			lit, ok = 0, false
			i = classEnd(g, i)
		default:
			lit, ok = g[i], true
			i++
		}
	}
	return lit, ok
}

// classEnd is the index after the character class starting at g[i] ('[')
// of a valid glob.
func classEnd(g string, i int) int {
	i++
	if i < len(g) && g[i] == '^' {
		i++
	}
	for first := true; i < len(g); first = false {
		switch {
		case g[i] == ']' && !first:
			return i + 1
		case g[i] == '\\':
			i += 2
		default:
			i++
		}
	}
	return i
}

// match reports whether the pattern decides topic (for a {user} pattern:
// whether topic has its shape, whoever asks).
func (p *pattern) match(topic string) bool {
	if !p.bySplit {
		return p.glob.match(topic)
	}
	for i := 0; i < len(topic); i++ {
		if !p.prefix.match(topic[:i]) {
			continue
		}
		for j := i + 1; j <= len(topic) && topic[j-1] != '/'; j++ {
			if p.suffix.match(topic[j:]) {
				return true
			}
		}
	}
	return false
}

// owner returns the user a topic of this {user} pattern's shape belongs
// to: the one run of the topic in {user}'s place that holds neither '/'
// nor a separator. A topic in which two different runs fit (possible only
// when the pattern has a wildcard before {user}) belongs to nobody.
func (p *pattern) owner(topic string) (user string, ok bool) {
	if p.prefix.literal() {
		if !strings.HasPrefix(topic, p.prefix.pat) {
			return "", false
		}
		return p.runAt(topic, len(p.prefix.pat))
	}
	// The prefix has a wildcard, so it ends with the literal sepBefore
	// (compilePattern): a run starts right after one.
	for i := 0; i < len(topic); i++ {
		if topic[i] != p.sepBefore {
			continue
		}
		run, fits := p.runAt(topic, i+1)
		if !fits {
			continue
		}
		if ok && run != user {
			return "", false
		}
		user, ok = run, true
	}
	return user, ok
}

// runAt returns the run of topic that fits {user} when it starts at i:
// up to the first sepAfter (or the end of the topic when {user} ends the
// pattern), non-empty, without '/' or sepBefore, with the prefix matching
// before it and the suffix after it.
func (p *pattern) runAt(topic string, i int) (string, bool) {
	j := len(topic)
	if p.sepAfter != 0 {
		k := strings.IndexByte(topic[i:], p.sepAfter)
		if k < 0 {
			return "", false
		}
		j = i + k
	}
	run := topic[i:j]
	if run == "" || strings.IndexByte(run, '/') >= 0 || (p.sepBefore != 0 && strings.IndexByte(run, p.sepBefore) >= 0) {
		return "", false
	}
	// A literal prefix was matched by owner already.
	if (!p.prefix.literal() && !p.prefix.match(topic[:i])) || !p.suffix.match(topic[j:]) {
		return "", false
	}
	return run, true
}

// owns reports whether user, a connection's user, owns topic under this
// {user} pattern. An anonymous connection owns nothing.
func (p *pattern) owns(topic, user string) bool {
	if user == "" {
		return false
	}
	run, ok := p.owner(topic)
	return ok && run == user
}
