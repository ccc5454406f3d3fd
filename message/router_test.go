package message

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"
)

func routerFixture(t *testing.T) (*Admission, map[string]*Class) {
	t.Helper()
	a := newAdmission(Deps{})
	cs := map[string]*Class{}
	for _, n := range []string{"exact", "report", "report-daily", "any", "q"} {
		cs[n] = mustRegister(t, a, n, Rule{})
	}
	return a, cs
}

func TestRouterClassOf(t *testing.T) {
	a, cs := routerFixture(t)
	r, err := NewRouter(a, map[string]string{
		"publish":        "exact",
		"report.daily":   "exact",        // exact beats every glob below
		"report.*":       "report",       // 8 bytes
		"report.daily.*": "report-daily", // longer: more specific
		"*":              "any",
		"q?":             "q",
		"[ab]?":          "q",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string
		want *Class
	}{
		{"publish", cs["exact"]},
		{"report.daily", cs["exact"]},
		{"report.weekly", cs["report"]},
		{"report.daily.eu", cs["report-daily"]},
		{"report.", cs["report"]},
		{"subscribe", cs["any"]},
		{"qx", cs["q"]},
		{"ax", cs["q"]},
		{"a/b", nil}, // '*' does not cross '/'
		{"", cs["any"]},
	}
	for range 2 { // the second pass is served from the cache
		for _, tt := range tests {
			if got := r.ClassOf(tt.give); got != tt.want {
				t.Errorf("ClassOf(%q) = %v, want %v", tt.give, name(got), name(tt.want))
			}
		}
	}
}

func name(c *Class) string {
	if c == nil {
		return "<nil>"
	}
	return c.Name()
}

// Among globs of equal length the choice is by pattern text, never map
// order: build the same router many times and it always answers the same.
func TestRouterGlobTieDeterministic(t *testing.T) {
	a, cs := routerFixture(t)
	methods := map[string]string{"a.*": "report", "*.b": "any", "?.?": "q"}
	want := cs["any"] // "*.b" < "?.?" < "a.*" in byte order
	for range 50 {
		r, err := NewRouter(a, methods)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.ClassOf("a.b"); got != want {
			t.Fatalf("ClassOf(a.b) = %v, want %v", name(got), name(want))
		}
	}
}

func TestRouterErrors(t *testing.T) {
	a, _ := routerFixture(t)
	tests := []struct {
		give map[string]string
		want []string // substrings of the error
	}{
		{map[string]string{"chat.send": "nope"}, []string{`"chat.send"`, `"nope"`, "not registered"}},
		{map[string]string{"chat.*": "nope"}, []string{`"chat.*"`, `"nope"`}},
		{map[string]string{"report.[": "report"}, []string{`"report.["`, `"report"`, "bad glob"}},
		{map[string]string{`bad\`: "report"}, []string{`"bad\\"`, "bad glob"}},
	}
	for _, tt := range tests {
		_, err := NewRouter(a, tt.give)
		if err == nil {
			t.Errorf("NewRouter(%v) accepted", tt.give)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("NewRouter(%v) error %q does not mention %s", tt.give, err, w)
			}
		}
	}
	r, err := NewRouter(a, nil)
	if err != nil || r.ClassOf("anything") != nil {
		t.Errorf("empty router: %v, %v", r, err)
	}
}

// Method names come from clients: the cache stops growing at its bound,
// and names past it are still classified correctly.
func TestRouterCacheBounded(t *testing.T) {
	a, cs := routerFixture(t)
	r, err := NewRouter(a, map[string]string{"report.*": "report"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range routerCacheMax + 500 {
		m := fmt.Sprintf("report.%d", i)
		if i%2 == 1 {
			m = fmt.Sprintf("junk.%d", i)
		}
		want := cs["report"]
		if i%2 == 1 {
			want = nil
		}
		if got := r.ClassOf(m); got != want {
			t.Fatalf("ClassOf(%q) = %v, want %v", m, name(got), name(want))
		}
	}
	if n := len(*r.cache.Load()); n != routerCacheMax {
		t.Fatalf("cache holds %d names, want the bound %d", n, routerCacheMax)
	}
}

func TestRouterConcurrent(t *testing.T) {
	a, cs := routerFixture(t)
	r, err := NewRouter(a, map[string]string{"report.*": "report", "publish": "exact"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 300 {
				m := fmt.Sprintf("report.%d", (i*7+w)%200)
				if got := r.ClassOf(m); got != cs["report"] {
					t.Errorf("ClassOf(%q) = %v", m, name(got))
				}
				if got := r.ClassOf("publish"); got != cs["exact"] {
					t.Errorf("ClassOf(publish) = %v", name(got))
				}
			}
		})
	}
	wg.Wait()
}

// FuzzClassOf feeds client-controlled method names to a router and checks
// the answer against a plain reading of the rules (exact, else the longest
// matching glob, ties by pattern text), on first sight and from the cache.
func FuzzClassOf(f *testing.F) {
	for _, s := range []string{"", "publish", "report.daily", "report.daily.eu", "report.", "a/b", "[", "\\", "*", "q\x00", "reportédaily", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	a := newAdmission(Deps{})
	for _, n := range []string{"exact", "report", "deep", "any"} {
		if err := a.Register(n, Rule{}); err != nil {
			f.Fatal(err)
		}
	}
	methods := map[string]string{
		"publish":        "exact",
		"report.daily":   "exact",
		"report.*":       "report",
		"report.*.*":     "deep",
		"report.?????.*": "deep",
		"*":              "any",
		"[!a-z]*":        "any",
	}
	r, err := NewRouter(a, methods)
	if err != nil {
		f.Fatal(err)
	}
	want := func(m string) string {
		if cl, ok := methods[m]; ok && !isGlob(m) {
			return cl
		}
		best := ""
		for p := range methods {
			if !isGlob(p) {
				continue
			}
			if ok, _ := path.Match(p, m); ok && (best == "" || len(p) > len(best) || len(p) == len(best) && p < best) {
				best = p
			}
		}
		if best == "" {
			return ""
		}
		return methods[best]
	}
	f.Fuzz(func(t *testing.T, m string) {
		w := want(m)
		for range 2 {
			got := r.ClassOf(m)
			if (got == nil) != (w == "") || got != nil && got.Name() != w {
				t.Fatalf("ClassOf(%q) = %v, want %q", m, name(got), w)
			}
		}
	})
}
