package handshake

import (
	"encoding/json"
	"path"
	"testing"
)

// FuzzTopicClaim: any bytes as the topics claim are either refused with an
// error or give a claim whose globs are all valid and within the bound;
// never a panic.
func FuzzTopicClaim(f *testing.F) {
	for _, seed := range []string{
		`{"subscribe":["chat:*"],"publish":["a","b/*"]}`, `{}`, `null`, `[]`, `"x"`, `7`,
		`{"subscribe":"x"}`, `{"publish":[1]}`, `{"publsh":[]}`, `{"subscribe":["["]}`, `{"subscribe":[""]}`,
		`{"subscribe":["\\"]}`, `{"subscribe":null,"publish":null}`, `{"subscribe":["a"]} trailing`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tc, err := parseTopicClaim(json.RawMessage(raw))
		if err != nil || tc == nil {
			return
		}
		for _, side := range [][]string{tc.Subscribe, tc.Publish} {
			if len(side) > maxClaimGlobs {
				t.Fatalf("%d globs accepted", len(side))
			}
			for _, g := range side {
				if _, err := path.Match(g, ""); err != nil || g == "" {
					t.Fatalf("invalid glob %q accepted", g)
				}
			}
		}
	})
}
