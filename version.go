package rtserver

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release of rtserver this is, in semantic versioning
// (CHANGELOG.md says what each release changed, docs/operations.md what
// an upgrade between two may see). It is read from the VERSION file at
// build time, so a binary built from a checkout, by go install from the
// module proxy, or in the container reports the same release.
func Version() string { return strings.TrimSpace(versionFile) }
