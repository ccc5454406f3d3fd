package pressure

import (
	"slices"
	"testing"
)

// later is a live bucket past every window of the tests' records (made
// in bucket 0), so that only the interval counts keep a key.
const later = 1000

// An attempt recorded between drain and prune is neither lost nor pruned:
// it is counted in the next interval.
func TestTableRecordBetweenDrainAndPrune(t *testing.T) {
	tb := newTable(10)
	tb.record("a", 5, 0)
	tb.record("b", 1, 0)
	buf, over := tb.drain(nil)
	slices.SortFunc(buf, better)
	if want := []entry{{"a", 1, 5}, {"b", 1, 1}}; !slices.Equal(buf, want) || over != 0 {
		t.Fatalf("drain = %v, %d, want %v, 0", buf, over, want)
	}
	tb.record("a", 7, 0) // between drain and prune
	tb.prune(nil, later)
	if n := tb.n.Load(); n != 1 {
		t.Fatalf("keys after prune = %d, want 1 (a, recorded since drain)", n)
	}
	buf, _ = tb.drain(buf)
	if want := []entry{{"a", 1, 7}}; !slices.Equal(buf, want) {
		t.Fatalf("next drain = %v, want %v", buf, want)
	}
	tb.prune(map[string]struct{}{"a": {}}, later)
	if n := tb.n.Load(); n != 1 {
		t.Fatalf("kept key pruned: %d keys", n)
	}
	tb.prune(nil, later)
	if n := tb.n.Load(); n != 0 {
		t.Fatalf("idle key not pruned: %d keys", n)
	}
}

// A recorder that looked a key up just before prune deleted it, and adds
// afterwards, is not lost: the retired counter is carried into the next
// drain.
func TestTableLateAddToRetiredCounter(t *testing.T) {
	tb := newTable(10)
	tb.record("a", 1, 0)
	tb.drain(nil)
	v, _ := tb.m.Load("a") // the recorder's lookup...
	tb.prune(nil, later)   // ...races prune, which deletes "a"
	if _, ok := tb.m.Load("a"); ok || tb.n.Load() != 0 {
		t.Fatal("idle key not pruned")
	}
	c := v.(*counter) // ...and the recorder adds to the deleted counter
	c.msgs.Add(1)
	c.bytes.Add(9)
	tb.record("a", 1, 0) // a new recorder gets a fresh counter
	buf, _ := tb.drain(nil)
	if want := []entry{{"a", 2, 10}}; !slices.Equal(buf, want) {
		t.Fatalf("drain = %v, want %v", buf, want)
	}
	if n := tb.n.Load(); n != 1 {
		t.Fatalf("keys = %d, want 1", n)
	}
}

// Past the bound, new keys are counted as overflow and the table does not
// grow; existing keys keep counting.
func TestTableBound(t *testing.T) {
	tb := newTable(3)
	for _, k := range []string{"a", "b", "c", "d", "e", "a"} {
		tb.record(k, 1, 0)
	}
	buf, over := tb.drain(nil)
	slices.SortFunc(buf, better)
	if want := []entry{{"a", 2, 2}, {"b", 1, 1}, {"c", 1, 1}}; !slices.Equal(buf, want) || over != 2 {
		t.Fatalf("drain = %v, overflow %d; want %v, 2", buf, over, want)
	}
}
