package access

import (
	"context"
	"path"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/handshake"
)

// model is the reference: what docs/access-control.md says, written the
// obvious way (every split of the topic tried, rather than compiled).
func model(nss []Namespace, def Rule, even func(string) bool, q Question) bool {
	if strings.HasPrefix(q.Topic, "__") {
		return false
	}
	grants, owner := def, false
	for _, n := range nss {
		if modelShape(n.Pattern, q.Topic) {
			grants = n.Rule
			if strings.Contains(n.Pattern, "{user}") {
				who, ok := modelOwner(n.Pattern, q.Topic)
				owner = ok && q.User != "" && who == q.User
			}
			break
		}
	}
	list, globs := grants.Subscribe, []string(nil)
	if q.Action == Publish {
		list = grants.Publish
	}
	if q.Claim != nil {
		globs = map[Action][]string{Subscribe: q.Claim.Subscribe, Publish: q.Claim.Publish}[q.Action]
	}
	return slices.ContainsFunc(list, func(g string) bool {
		switch g {
		case "any":
			return true
		case "authenticated":
			return q.User != ""
		case "owner":
			return owner
		case "claim":
			return slices.ContainsFunc(globs, func(g string) bool { ok, _ := path.Match(g, q.Topic); return ok })
		case "even":
			return even(q.Topic)
		}
		return false
	})
}

// modelSplits calls f with every split of topic into what the glob
// before {user} matches, a non-empty run without '/' in its place, and
// what the glob after it matches.
func modelSplits(pattern, topic string, f func(run string)) {
	before, after, _ := strings.Cut(pattern, "{user}")
	for i := 0; i <= len(topic); i++ {
		for j := i + 1; j <= len(topic); j++ {
			run := topic[i:j]
			okBefore, _ := path.Match(before, topic[:i])
			okAfter, _ := path.Match(after, topic[j:])
			if okBefore && okAfter && !strings.Contains(run, "/") {
				f(run)
			}
		}
	}
}

// modelShape: does the namespace decide topic? A {user} pattern decides
// every topic some run fits, whoever asks.
func modelShape(pattern, topic string) bool {
	if !strings.Contains(pattern, "{user}") {
		ok, _ := path.Match(pattern, topic)
		return ok
	}
	shape := false
	modelSplits(pattern, topic, func(string) { shape = true })
	return shape
}

// modelOwner is the one run that fits without holding a separator (the
// literal characters around {user}; the generators write no escapes), if
// exactly one does.
func modelOwner(pattern, topic string) (string, bool) {
	before, after, _ := strings.Cut(pattern, "{user}")
	seps := ""
	if before != "" {
		seps += before[len(before)-1:]
	}
	if after != "" {
		seps += after[:1]
	}
	runs := map[string]bool{}
	modelSplits(pattern, topic, func(run string) {
		if !strings.ContainsAny(run, seps) {
			runs[run] = true
		}
	})
	if len(runs) != 1 {
		return "", false
	}
	for r := range runs {
		return r, true
	}
	return "", false
}

// Small alphabets, so that random topics, users and patterns meet often.
var (
	genUser  = rapid.SampledFrom([]string{"", "a", "b", "ab", "ba", "a:b", "a/b"})
	genTopic = rapid.Custom(func(t *rapid.T) string {
		s := rapid.StringOfN(rapid.SampledFrom([]rune("ab:/")), 1, 6, -1).Draw(t, "topic")
		if rapid.IntRange(0, 9).Draw(t, "reserved") == 0 {
			s = "__" + s
		}
		return s
	})
	genGlob = rapid.Custom(func(t *rapid.T) string {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", ":", "/", "*", "?", "[ab]", "[^a]"}), 0, 4).Draw(t, "glob")
		return strings.Join(parts, "")
	})
	// genUserPattern is a valid {user} pattern: {user} between literal
	// characters (its separators) or the pattern's ends.
	genUserPattern = rapid.Custom(func(t *rapid.T) string {
		sep := rapid.SampledFrom([]string{"a", "b", ":", "/"})
		before, after := "", ""
		if rapid.Bool().Draw(t, "before") {
			before = genGlob.Draw(t, "prefix") + sep.Draw(t, "sepBefore")
		}
		if rapid.Bool().Draw(t, "after") {
			after = sep.Draw(t, "sepAfter") + genGlob.Draw(t, "suffix")
		}
		return before + "{user}" + after
	})
	genGrants = func(owner bool) *rapid.Generator[[]string] {
		words := []string{"any", "authenticated", "claim", "even"}
		if owner {
			words = append(words, "owner")
		}
		return rapid.SliceOfN(rapid.SampledFrom(words), 0, 3)
	}
)

func TestCheckMatchesModel(t *testing.T) {
	t.Parallel()
	even := func(topic string) bool { return len(topic)%2 == 0 }
	rapid.Check(t, func(t *rapid.T) {
		var nss []Namespace
		for i := range rapid.IntRange(0, 4).Draw(t, "namespaces") {
			pat := genGlob.Draw(t, "pattern")
			if rapid.Bool().Draw(t, "hasUser") {
				pat = genUserPattern.Draw(t, "userPattern")
			}
			if pat == "" {
				pat = "*"
			}
			hasUser := strings.Contains(pat, "{user}")
			nss = append(nss, Namespace{Pattern: pat, Rule: Rule{
				Subscribe: genGrants(hasUser).Draw(t, "sub"+string(rune('0'+i))),
				Publish:   genGrants(hasUser).Draw(t, "pub"+string(rune('0'+i))),
			}})
		}
		def := Rule{Subscribe: genGrants(false).Draw(t, "defSub"), Publish: genGrants(false).Draw(t, "defPub")}
		c, err := New(Config{Namespaces: nss, Default: &def}, Deps{Grants: map[string]GrantFunc{
			"even": func(_ context.Context, q Question) (bool, error) { return even(q.Topic), nil },
		}})
		if err != nil {
			t.Fatalf("valid config refused: %v", err)
		}
		for range 20 {
			q := Question{Topic: genTopic.Draw(t, "topic"), User: genUser.Draw(t, "user")}
			if rapid.Bool().Draw(t, "publish") {
				q.Action = Publish
			}
			if q.User != "" && rapid.Bool().Draw(t, "hasClaim") {
				q.Claim = &handshake.TopicClaim{
					Subscribe: rapid.SliceOfN(genGlob, 0, 2).Draw(t, "claimSub"),
					Publish:   rapid.SliceOfN(genGlob, 0, 2).Draw(t, "claimPub"),
				}
			}
			want := Deny
			if model(nss, def, even, q) {
				want = Allow
			}
			if got := c.Check(context.Background(), q); got != want {
				t.Fatalf("%v %q by %q (claim %+v): Check = %v, model = %v\nnamespaces %+v\ndefault %+v", q.Action, q.Topic, q.User, q.Claim, got, want, nss, def)
			}
		}
	})
}

// A {user} pattern owns its shape: for arbitrary patterns, user ids and
// topics, owner allows only the topic's one owner, never an anonymous
// connection, and a topic of the pattern's shape is decided by its
// namespace, never by the default behind it (which here allows
// everyone).
func TestUserPatternOwnsItsShape(t *testing.T) {
	// Not parallel: it shares the package's generators with
	// TestCheckMatchesModel, and a rapid generator initialises itself
	// lazily on first use.
	rapid.Check(t, func(t *rapid.T) {
		pat := genUserPattern.Draw(t, "pattern")
		c, err := New(Config{
			Namespaces: []Namespace{{Pattern: pat, Rule: Rule{Subscribe: []string{"owner"}, Publish: []string{"owner"}}}},
			Default:    &Rule{Subscribe: []string{"any"}, Publish: []string{"any"}},
		}, Deps{})
		if err != nil {
			t.Fatalf("valid pattern %q refused: %v", pat, err)
		}
		topic := rapid.StringOfN(rapid.SampledFrom([]rune("ab:/")), 1, 8, -1).Draw(t, "topic")
		users := []string{""}
		// Some users are runs of the topic, so that owners are found
		// often; others hold glob characters, which are data.
		for range 4 {
			if rapid.Bool().Draw(t, "fromTopic") {
				i := rapid.IntRange(0, len(topic)).Draw(t, "i")
				j := rapid.IntRange(i, len(topic)).Draw(t, "j")
				users = append(users, topic[i:j])
			} else {
				users = append(users, rapid.StringOfN(rapid.SampledFrom([]rune("ab:/*?[]")), 0, 4, -1).Draw(t, "user"))
			}
		}
		shape := modelShape(pat, topic)
		owner, owned := modelOwner(pat, topic)
		allowed := map[string]bool{}
		for _, u := range users {
			for _, a := range []Action{Subscribe, Publish} {
				got := c.Check(context.Background(), Question{Action: a, Topic: topic, User: u}) == Allow
				switch {
				case !shape && !got:
					t.Fatalf("%q is not of %q's shape, yet the default did not decide it for %q", topic, pat, u)
				case shape && got && u == "":
					t.Fatalf("%q: %q allowed to an anonymous connection (fell through?)", pat, topic)
				case shape && got && (!owned || u != owner):
					t.Fatalf("%q: %q allowed to %q; its owner is %q (owned %v)", pat, topic, u, owner, owned)
				case shape && !got && owned && u == owner:
					t.Fatalf("%q: %q refused to its owner %q", pat, topic, u)
				}
				if shape && got {
					allowed[u] = true
				}
			}
		}
		if len(allowed) > 1 {
			t.Fatalf("%q: %q allowed to %d users: %v", pat, topic, len(allowed), allowed)
		}
	})
}

// glob.match is path.Match for every valid pattern, escapes included.
func TestGlobMatchesPathMatch(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", ":", "/", "*", "?", "[ab]", "[^a]", "[a-b]", `\*`, `\a`, "**"}), 0, 5).Draw(t, "pattern")
		p := strings.Join(parts, "")
		s := rapid.StringOfN(rapid.SampledFrom([]rune("ab:/*")), 0, 6, -1).Draw(t, "s")
		want, err := path.Match(p, s)
		if err != nil {
			t.Skip("invalid pattern")
		}
		if got := matchGlob(p, s); got != want {
			t.Fatalf("matchGlob(%q, %q) = %v, path.Match says %v", p, s, got, want)
		}
	})
}

// A character class may match '/', where * and ? never do; path.Match
// places each chunk at its leftmost fit, which then misses "aaba/" (run
// "aab", then "a", then "/" for [^a]). The shape must still decide it.
func TestUserShapeWithClassMatchingSlash(t *testing.T) {
	p, err := compilePattern("{user}a[^a]*")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]bool{"aaba/": true, "xab": true, "a/ab": false, "aa": false} {
		if got := p.match(topic); got != want {
			t.Errorf("match(%q) = %v, want %v", topic, got, want)
		}
	}
}
