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
// obvious way ({user} substituted into the glob rather than split around).
func model(nss []Namespace, def Rule, even func(string) bool, q Question) bool {
	if strings.HasPrefix(q.Topic, "__") {
		return false
	}
	grants, owner := def, false
	for _, n := range nss {
		glob, hasUser := strings.Replace(n.Pattern, "{user}", q.User, 1), strings.Contains(n.Pattern, "{user}")
		if ok, _ := path.Match(glob, q.Topic); ok && (!hasUser || q.User != "") {
			grants, owner = n.Rule, hasUser
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

// Small alphabets, so that random topics, users and patterns meet often.
var (
	genUser  = rapid.SampledFrom([]string{"", "a", "b", "ab", "ba", "a:b"})
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
				at := rapid.IntRange(0, len(pat)).Draw(t, "at")
				pat = pat[:at] + "{user}" + pat[at:]
				if _, err := compilePattern(pat); err != nil { // the cut split a [class]
					pat = strings.NewReplacer("[", "", "]", "", "^", "").Replace(pat)
				}
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
		c, err := New(Config{Namespaces: nss, Default: &def, Grants: map[string]GrantFunc{
			"even": func(_ context.Context, q Question) (bool, error) { return even(q.Topic), nil },
		}}, nil, nil)
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
