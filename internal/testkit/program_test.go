package testkit

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// fakeT records what Program does with a missing program, without ending
// the real test.
type fakeT struct {
	testing.TB
	skipped, failed string
}

func (f *fakeT) Helper()          {}
func (f *fakeT) Skip(args ...any) { f.skipped = args[0].(string) }
func (f *fakeT) Fatal(args ...any) {
	f.failed = args[0].(string)
}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestProgramMissing(t *testing.T) {
	const missing = "rtserver-no-such-program"
	t.Setenv(RequireIntegration, "")
	f := &fakeT{TB: t}
	Program(f, missing, "apt-get install it")
	if f.failed != "" || !strings.Contains(f.skipped, missing) || !strings.Contains(f.skipped, "apt-get install it") {
		t.Fatalf("without %s: skipped %q, failed %q; want a skip naming the program", RequireIntegration, f.skipped, f.failed)
	}

	t.Setenv(RequireIntegration, "1")
	f = &fakeT{TB: t}
	Program(f, missing, "apt-get install it")
	if f.skipped != "" || !strings.Contains(f.failed, missing) {
		t.Fatalf("with %s=1: skipped %q, failed %q; want a failure naming the program", RequireIntegration, f.skipped, f.failed)
	}
}

func TestProgramPresent(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	if p := Program(t, self, "it is this test"); p == "" {
		t.Fatal("Program did not find the running test binary")
	}
}
