package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeDoc(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A command block without a marker is an error naming its line; a skip
// needs a reason; other languages need no marker.
func TestParseDocMarkers(t *testing.T) {
	for _, tt := range []struct {
		name, give string
		wantErr    string // "" for none
		wantModes  []string
	}{
		{
			name:    "unmarked console block",
			give:    "# T\n\n```console\n$ echo hi\nhi\n```\n",
			wantErr: "doc.md:3",
		},
		{
			name: "marked, skipped and other blocks",
			give: "<!-- doctest: s file a.yaml -->\n```yaml\nk: v\n```\n\n" +
				"<!-- doctest: s -->\n```sh\necho\n```\n" +
				"<!-- doctest: skip too long -->\n```sh\nsleep 999\n```\n" +
				"```go\nfunc f() {}\n```\n" +
				"<!-- doctest: s background -->\n```console\n$ cat\n```\n",
			wantModes: []string{"file", "run", "background"},
		},
		{
			name:    "skip without a reason",
			give:    "<!-- doctest: skip -->\n```sh\necho\n```\n",
			wantErr: "needs a reason",
		},
		{
			name:    "marker separated from its block by text",
			give:    "<!-- doctest: s -->\nsome words\n```sh\necho\n```\n",
			wantErr: "without a doctest marker",
		},
		{
			name:    "background sh block",
			give:    "<!-- doctest: s background -->\n```sh\necho\n```\n",
			wantErr: "does not fit",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			blocks, err := parseDoc(writeDoc(t, tt.give))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var modes []string
			for _, b := range blocks {
				modes = append(modes, b.mode)
			}
			if !slices.Equal(modes, tt.wantModes) {
				t.Fatalf("modes = %q, want %q", modes, tt.wantModes)
			}
		})
	}
}

func TestParseConsole(t *testing.T) {
	cmds, err := parseConsole("$ a \\\n  --b\nout 1\nout 2\n\n$ c\n$ d\nx\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []consoleCmd{{cmd: "a \\\n  --b", want: []string{"out 1", "out 2"}}, {cmd: "c"}, {cmd: "d", want: []string{"x"}}}
	if len(cmds) != len(want) {
		t.Fatalf("got %d commands: %q", len(cmds), cmds)
	}
	for i := range want {
		if cmds[i].cmd != want[i].cmd || !slices.Equal(cmds[i].want, want[i].want) {
			t.Errorf("command %d = %q, want %q", i, cmds[i], want[i])
		}
	}
	if _, err := parseConsole("output first\n$ a\n"); err == nil {
		t.Error("a console block starting with output parsed")
	}
}

// curl prints no final newline, so a step mark may follow output on its
// line; output after the last mark before "end" belongs to that step.
func TestSplitSteps(t *testing.T) {
	out := "@@doctest-step block x:1\nlog\n@@doctest-step 0\n{\"result\":{}}@@doctest-step 1\n@@doctest-step 2\na\nb\n\n@@doctest-step end\n"
	steps, ended := splitSteps(out)
	if !ended {
		t.Error("end not seen")
	}
	for id, want := range map[string][]string{"0": {`{"result":{}}`}, "1": {}, "2": {"a", "b"}} {
		if got, ok := steps[id]; !ok || !slices.Equal(got, want) {
			t.Errorf("step %s = %q (present %v), want %q", id, got, ok, want)
		}
	}
}

func TestNormalise(t *testing.T) {
	for give, want := range map[string]string{
		"ok: user alice, expires 2026-11-27T19:41:56Z":         "ok: user alice, expires <time>",
		`{"epoch":"9f2c01aa","offset":2}`:                      `{"epoch":"<hex>","offset":2}`,
		`{"client":"9f2c41d07ab35e16.42","user":"carol"}`:      `{"client":"<hex>","user":"carol"}`,
		"TOKEN eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln done": "TOKEN <token> done",
		`{"code":-32003,"message":"FORBIDDEN"}`:                `{"code":-32003,"message":"FORBIDDEN"}`,
	} {
		if got := normalise(give); got != want {
			t.Errorf("normalise(%q) = %q, want %q", give, got, want)
		}
	}
}
