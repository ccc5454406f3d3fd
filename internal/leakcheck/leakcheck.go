// Package leakcheck fails a test that leaves goroutines behind.
//
// Check records the goroutines running when it is called and, at cleanup,
// waits (bounded) until every goroutine started since has ended; the ones
// still running are reported with their stacks. Goroutines are identified
// by their id, so goroutines that existed before the test do not count.
package leakcheck

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Check registers the leak check on t. Call it first in a test, so its
// cleanup runs last (after the servers and clients the test started are
// closed).
func Check(t testing.TB) {
	t.Helper()
	before := goroutines()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			leaked := leakedSince(before)
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leakcheck: %d goroutine(s) still running:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
				return
			}
			time.Sleep(20 * time.Millisecond) // goroutines wind down on their own schedule
		}
	})
}

func leakedSince(before map[string]bool) []string {
	var out []string
	for id, stack := range stacks() {
		if before[id] || ignorable(stack) {
			continue
		}
		out = append(out, stack)
	}
	return out
}

func goroutines() map[string]bool {
	m := map[string]bool{}
	for id := range stacks() {
		m[id] = true
	}
	return m
}

// ignorable marks runtime and test-framework goroutines that come and go
// independently of the code under test.
func ignorable(stack string) bool {
	for _, s := range []string{
		"testing.tRunner", "testing.runTests", "testing.(*M).",
		"os/signal.signal_recv", "runtime.ensureSigM", "leakcheck.stacks",
		"created by net/http.(*Transport)", // keep-alive pools of test HTTP clients
	} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// stacks returns every goroutine's stack keyed by its id.
func stacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		// "goroutine 123 [running]:"
		f := strings.Fields(s)
		if len(f) < 2 || f[0] != "goroutine" {
			continue
		}
		m[f[1]] = s
	}
	return m
}
