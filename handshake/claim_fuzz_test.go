package handshake

import (
	"bytes"
	"encoding/json"
	"path"
	"strings"
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

// FuzzClaimNames: a JSON object of claims is refused exactly when a
// tokenizer sees a claim the server reads twice, or a case variant of
// one; whatever is accepted decodes to the sub written exactly as "sub".
func FuzzClaimNames(f *testing.F) {
	for _, seed := range []string{
		`{"sub":"a"}`, `{"sub":"a","SUB":"b"}`, `{"Sub":"b"}`, `{"sub":"a","sub":"b"}`,
		`{"\u0073ub":"a","sub":"b"}`, `{"x":{"SUB":1},"sub":"a"}`, `{"ſub":"a"}`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return
		}
		want, sub, seen := true, "", map[string]bool{}
		for dec.More() {
			tok, _ := dec.Token()
			key := tok.(string)
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return
			}
			for _, name := range claimNames {
				if key == name && seen[name] || key != name && strings.EqualFold(key, name) {
					want = false
				}
			}
			if key == "sub" && !seen["sub"] {
				_ = json.Unmarshal(v, &sub)
			}
			seen[key] = true
		}
		var c claims
		err := json.Unmarshal(raw, &c)
		if got := checkClaimNames(raw) == nil; got != want {
			t.Fatalf("%s: accepted %v, want %v", raw, got, want)
		}
		if want && err == nil && c.Subject != sub {
			t.Fatalf("%s: sub %q, want %q", raw, c.Subject, sub)
		}
	})
}
