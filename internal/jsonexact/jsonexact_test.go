package jsonexact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// DeeperThan agrees with a decoder that counts levels the obvious way.
func TestDeeperThanMatchesTokenizer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var value func(level int) string
		value = func(level int) string {
			kind := rapid.IntRange(0, 3).Draw(t, "kind")
			if level > 8 {
				kind = 0
			}
			switch kind {
			case 0:
				return rapid.SampledFrom([]string{"1", `"[{"`, `"a\"]}"`, "null"}).Draw(t, "scalar")
			case 1:
				n := rapid.IntRange(0, 3).Draw(t, "n")
				parts := make([]string, n)
				for i := range parts {
					parts[i] = value(level + 1)
				}
				return "[" + strings.Join(parts, ",") + "]"
			default:
				n := rapid.IntRange(0, 3).Draw(t, "n")
				parts := make([]string, n)
				for i := range parts {
					parts[i] = fmt.Sprintf(`"k%d":%s`, i, value(level+1))
				}
				return "{" + strings.Join(parts, ",") + "}"
			}
		}
		s := value(0)
		if !json.Valid([]byte(s)) {
			t.Fatalf("generated %s is not JSON", s)
		}
		limit := rapid.IntRange(0, 6).Draw(t, "limit")
		dec := json.NewDecoder(strings.NewReader(s))
		depth, deepest := 0, 0
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch tok {
			case json.Delim('['), json.Delim('{'):
				depth++
				deepest = max(deepest, depth)
			case json.Delim(']'), json.Delim('}'):
				depth--
			}
		}
		if got := DeeperThan([]byte(s), limit); got != (deepest > limit) {
			t.Fatalf("DeeperThan(%s, %d) = %v, deepest %d", s, limit, got, deepest)
		}
	})
}

// Members reads exact names, reports a repeated one, and ignores others.
func TestMembers(t *testing.T) {
	tests := []struct {
		give      string
		wantTopic string
		wantDup   string
		wantOther bool
	}{
		{give: `{"topic":"a"}`, wantTopic: `"a"`},
		{give: `{"Topic":"a"}`, wantOther: true},
		{give: `{"\u0074opic":"a"}`, wantTopic: `"a"`},
		{give: `{"topic":"a","topic":"b"}`, wantTopic: `"a"`, wantDup: "topic"},
		{give: `{"x":{"topic":"nested"},"topic":"a"}`, wantTopic: `"a"`, wantOther: true},
	}
	for _, tt := range tests {
		vals := make([][]byte, 1)
		dup, other, ok := Members([]byte(tt.give), []string{"topic"}, vals)
		if !ok || string(vals[0]) != tt.wantTopic || dup != tt.wantDup || other != tt.wantOther {
			t.Errorf("%s: topic %s dup %q other %v ok %v", tt.give, vals[0], dup, other, ok)
		}
	}
}
