package testkit

import (
	"os"
	"testing"
)

// OpenFDs counts the process's open descriptors, for a test that checks
// it leaks none; it skips the test where /proc/self/fd cannot be read.
func OpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
