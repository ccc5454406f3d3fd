package testkit

import (
	"os"
	"os/exec"
	"testing"
)

// RequireIntegration is the environment variable that turns a missing
// program from a skip into a failure.
const RequireIntegration = "RTSERVER_REQUIRE_INTEGRATION"

// Program returns the path of the external program name (a name on PATH,
// or an absolute path) that the test needs. When it is missing the test is
// skipped with a message naming the program and how to get it (install,
// e.g. "apt-get install redis-server"), or fails with that message when
// RTSERVER_REQUIRE_INTEGRATION=1.
func Program(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := "this test needs " + name + ", which is missing (" + install + "): " + err.Error()
	if os.Getenv(RequireIntegration) == "1" {
		t.Fatal(msg + "; " + RequireIntegration + "=1 makes that a failure")
		return ""
	}
	t.Skip(msg + "; skipped (" + RequireIntegration + "=1 makes it a failure)")
	return ""
}
