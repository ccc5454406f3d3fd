package handshake

import (
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestDisplayName(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes
	for _, tt := range []struct{ query, want string }{
		{"", ""},
		{"token=x", ""},
		{"name=alice", "alice"},
		{"name=+alice+", "alice"},
		{"name=Alice%20B.&token=x", "Alice B."},
		{"nickname=alice", ""},
		{"name=a%00b", ""},
		{"name=a%0Ab", ""},
		{"name=a%C2%85b", ""}, // NEL, a C1 control
		{"name=%FF", ""},
		{"name=" + strings.Repeat("n", 70), strings.Repeat("n", MaxNameLen)},
		{"name=" + long, strings.Repeat("é", MaxNameLen/2)},
		{"name=a&name=b", "a"},
	} {
		r := httptest.NewRequest("GET", "/ws?"+tt.query, nil)
		if got := DisplayName(r); got != tt.want {
			t.Errorf("?%s: %q, want %q", tt.query, got, tt.want)
		}
	}
}

// Whatever a client sends, a name is at most MaxNameLen bytes of UTF-8
// without control characters, and a clean short name is kept as is.
func TestDisplayNameIsAlwaysClean(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		raw := rapid.String().Draw(t, "raw")
		got := cleanName(raw)
		if len(got) > MaxNameLen || !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }) {
			t.Fatalf("cleanName(%q) = %q", raw, got)
		}
		if trimmed := strings.TrimSpace(raw); got != "" && len(trimmed) <= MaxNameLen && got != trimmed {
			t.Fatalf("cleanName(%q) = %q, want %q", raw, got, trimmed)
		}
	})
}
