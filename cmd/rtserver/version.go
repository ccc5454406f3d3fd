package main

import (
	"runtime/debug"

	"github.com/rtserver/rtserver"
)

// revision is the source revision of the build, when the builder stamps
// it: -ldflags "-X main.revision=$(git rev-parse HEAD)" (the Dockerfile
// does, from its REVISION argument). Empty: what the Go build recorded.
var revision string

// version is what --version prints after "rtserver ": the release (the
// VERSION file, never "(devel)"), the revision in parentheses when one is
// known, and the Go version. A build by go install of a module version
// other than the release (a pseudo-version between releases) names that
// version as its revision.
func version() string {
	v := rtserver.Version()
	rev := revision
	goVersion := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if m := bi.Main.Version; rev == "" && m != "" && m != "(devel)" && m != "v"+v {
			rev = m
		}
		dirty := false
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = true
			}
		}
		if dirty && rev != "" {
			rev += "-dirty"
		}
	}
	if rev != "" {
		v += " (" + rev + ")"
	}
	if goVersion != "" {
		v += " " + goVersion
	}
	return v
}
