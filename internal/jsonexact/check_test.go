package jsonexact

import (
	"encoding/json"
	"strings"
	"testing"
)

var checkSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"x":[1,"]}"]}}}`,
	``, ` `, `{`, `}`, `[`, `]`, `[]`, `{}`, ` [ ] `, `[,]`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{1:2}`,
	`{"a" : 1 , "b" : [ 1 , { } ] }`, `[1 2]`, `{"a":1 "b":2}`, `[}`, `{]`, `[[[]]]`, `[[[]]`,
	`0`, `-0`, `-`, `01`, `1.`, `1.0`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-01`, `1.5e3`, `2.e3`,
	`1true`, `true`, `tru`, `truex`, `false`, `null`, `nul`, `nulll`, `True`,
	`""`, `"`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00G9"`, `"\u00e"`, `"\x"`, "\"\x01\"", "\"\x7f\"",
	"\"\xff\xfe\"", "\xff", "\"a\tb\"", `"abcdefgh"`, `"abc\"defgh"`, "\t\r\n 1 \n", "1\x00", `{"a":"b"}x`,
	strings.Repeat("[", 70) + strings.Repeat("]", 70),
}

// Check decides validity exactly as json.Valid and depth exactly as
// DeeperThan, on any input and any limit.
func FuzzCheck(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, b []byte, maxDepth int) {
		maxDepth %= 100
		valid, deep := Check(b, maxDepth)
		if want := json.Valid(b); valid != want {
			t.Fatalf("Check(%q) valid = %v, json.Valid %v", b, valid, want)
		}
		if valid && deep != DeeperThan(b, maxDepth) {
			t.Fatalf("Check(%q, %d) deep = %v, DeeperThan %v", b, maxDepth, deep, !deep)
		}
	})
}

func TestCheckSeeds(t *testing.T) {
	for _, s := range checkSeeds {
		for _, d := range []int{0, 1, 2, 64} {
			valid, deep := Check([]byte(s), d)
			if want := json.Valid([]byte(s)); valid != want {
				t.Errorf("Check(%q) valid = %v, json.Valid %v", s, valid, want)
			}
			if valid && deep != DeeperThan([]byte(s), d) {
				t.Errorf("Check(%q, %d) deep = %v", s, d, deep)
			}
		}
	}
}

// encoding/json refuses nesting past 10,000 levels whatever the caller's
// limit, and so does Check.
func TestCheckNestingLimit(t *testing.T) {
	for _, n := range []int{maxNesting, maxNesting + 1} {
		for _, open := range []string{"[", `{"a":`} {
			shut := map[string]string{"[": "]", `{"a":`: "}"}[open]
			b := []byte(strings.Repeat(open, n) + "1" + strings.Repeat(shut, n))
			valid, deep := Check(b, 1<<20)
			if want := json.Valid(b); valid != want || deep {
				t.Errorf("%d levels of %s: valid %v deep %v, json.Valid %v", n, open, valid, deep, want)
			}
		}
	}
}

func TestCheckAllocatesNothing(t *testing.T) {
	b := []byte(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"x":[1,"]}"]}}}`)
	if n := testing.AllocsPerRun(100, func() { Check(b, 64) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkCheck(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":42,"method":"publish","params":{"topic":"chat:room-17","data":{"rtbts":123456789012,"pad":"` + strings.Repeat("x", 80) + `"}}}`)
	b.Run("Check", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			Check(frame, 64)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			json.Valid(frame)
		}
	})
}

// skipString finds the end of every valid string literal, escapes at any
// offset included (it steps through the first bytes and searches the rest).
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`""`, `"a"`, `"\""`, `"\\"`, `"0123456789abcd\"ef\\"`, `"0123456789abcde\"f"`,
		`"0123456789abcdef\\\\\"\\"`, `"0123456789abcdefghij\\"`, `"\u0022"`} {
		f.Add([]byte(s), []byte(`,1]`))
	}
	f.Fuzz(func(t *testing.T, s, rest []byte) {
		if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' || !json.Valid(s) {
			return
		}
		b := append(append([]byte(nil), s...), rest...)
		if got := skipString(b, 0); got != len(s) {
			t.Fatalf("skipString(%q) = %d, want %d", b, got, len(s))
		}
	})
}
