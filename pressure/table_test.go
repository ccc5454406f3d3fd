package pressure

import (
	"slices"
	"testing"
)

// An attempt recorded between drain and prune is neither lost nor pruned:
// it is counted in the next interval.
func TestTableRecordBetweenDrainAndPrune(t *testing.T) {
	tb := newTable(10)
	tb.record("a", 5)
	tb.record("b", 1)
	buf, over := tb.drain(nil)
	slices.SortFunc(buf, better)
	if want := []entry{{"a", 1, 5}, {"b", 1, 1}}; !slices.Equal(buf, want) || over != 0 {
		t.Fatalf("drain = %v, %d, want %v, 0", buf, over, want)
	}
	tb.record("a", 7) // between drain and prune
	tb.prune(nil)
	if n := tb.n.Load(); n != 1 {
		t.Fatalf("keys after prune = %d, want 1 (a, recorded since drain)", n)
	}
	buf, _ = tb.drain(buf)
	if want := []entry{{"a", 1, 7}}; !slices.Equal(buf, want) {
		t.Fatalf("next drain = %v, want %v", buf, want)
	}
	tb.prune(map[string]struct{}{"a": {}})
	if n := tb.n.Load(); n != 1 {
		t.Fatalf("kept key pruned: %d keys", n)
	}
	tb.prune(nil)
	if n := tb.n.Load(); n != 0 {
		t.Fatalf("idle key not pruned: %d keys", n)
	}
}
