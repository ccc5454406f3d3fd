package rtserver_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/rtserver/rtserver"
)

var semverRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// One release number everywhere: the VERSION file (what the binary
// prints), the newest release of CHANGELOG.md, and the JS package (its
// package.json, its lock file and the VERSION it exports). A release
// changes them together or this fails.
func TestReleaseVersionAgrees(t *testing.T) {
	t.Parallel()
	v := rtserver.Version()
	if !semverRE.MatchString(v) {
		t.Fatalf("VERSION holds %q, want MAJOR.MINOR.PATCH", v)
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	// The first release heading after [Unreleased].
	m := regexp.MustCompile(`(?m)^## \[([0-9][^\]]*)\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$`).FindSubmatch(changelog)
	if m == nil || string(m[1]) != v {
		t.Errorf("CHANGELOG.md's newest release is %q, VERSION says %s", m, v)
	}
	if !regexp.MustCompile(`(?m)^## \[Unreleased\]$`).Match(changelog) {
		t.Error(`CHANGELOG.md has no "## [Unreleased]" section for the changes after the newest release`)
	}

	var pkg struct {
		Version string `json:"version"`
	}
	readJSON(t, "clients/js/package.json", &pkg)
	if pkg.Version != v {
		t.Errorf("clients/js/package.json version %q, VERSION %s", pkg.Version, v)
	}
	var lock struct {
		Version  string `json:"version"`
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	readJSON(t, "clients/js/package-lock.json", &lock)
	if lock.Version != v || lock.Packages[""].Version != v {
		t.Errorf("clients/js/package-lock.json versions %q and %q, VERSION %s", lock.Version, lock.Packages[""].Version, v)
	}
	js, err := os.ReadFile("clients/js/rtclient.js")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^export const VERSION = "` + regexp.QuoteMeta(v) + `";$`).Match(js) {
		t.Errorf("clients/js/rtclient.js does not export VERSION = %q", v)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
