package message

import "testing"

// TestHotPathsDoNotAllocate guards the zero-allocation budget of every
// benchmarked hot path, as a count rather than a timing.
func TestHotPathsDoNotAllocate(t *testing.T) {
	for _, p := range benchPaths() {
		f := p.run(t)
		f() // first call may create the limiter key and the conn key text
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("Check %s: %v allocs per call, want 0", p.name, n)
		}
	}
	r := routerForBench(t)
	for _, m := range []string{"publish", "report.daily", "chat.x", "ping"} {
		r.ClassOf(m) // a glob result is cached on first sight
		if n := testing.AllocsPerRun(1000, func() { r.ClassOf(m) }); n != 0 {
			t.Errorf("ClassOf(%q): %v allocs per call, want 0", m, n)
		}
	}
	// Release of a Call that holds nothing, and a conn-keyed rate part.
	var idle Call
	if n := testing.AllocsPerRun(1000, idle.Release); n != 0 {
		t.Errorf("idle Release: %v allocs", n)
	}
}
