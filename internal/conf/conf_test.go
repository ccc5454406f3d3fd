package conf

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// mode is a text type, as the packages' enums are.
type mode int

func (m mode) MarshalText() ([]byte, error) {
	switch m {
	case 0:
		return []byte("off"), nil
	case 1:
		return []byte("on"), nil
	}
	return nil, fmt.Errorf("bad mode %d", int(m))
}

func (m *mode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "off":
		*m = 0
	case "on":
		*m = 1
	default:
		return errors.New("want on or off")
	}
	return nil
}

type part struct {
	Limit int           `yaml:"limit" help:"limit"`
	Per   time.Duration `yaml:"per" help:"per"`
}

type rule struct {
	Modes []mode `yaml:"modes,omitempty" help:"modes"`
	Rate  *part  `yaml:"rate,omitempty"`
	Fn    func() `yaml:"-"`
}

type Grants struct {
	Subscribe []string `yaml:"subscribe" help:"subscribe"`
	Publish   []string `yaml:"publish" help:"publish"`
}

type namespace struct {
	Pattern string `yaml:"pattern" help:"pattern"`
	Grants  `yaml:",inline"`
}

type section struct {
	Count   int            `yaml:"count" help:"count"`
	Bytes   uint64         `yaml:"bytes" help:"bytes"`
	Ratio   float64        `yaml:"ratio" help:"ratio"`
	On      bool           `yaml:"on" help:"on"`
	Wait    time.Duration  `yaml:"wait" help:"wait"`
	Mode    mode           `yaml:"mode" help:"mode"`
	Secret  []byte         `yaml:"secret" help:"secret"`
	Proxies []netip.Prefix `yaml:"proxies" help:"proxies"`
	Names   []string       `yaml:"names" help:"names"`
	Hidden  int            `yaml:"-"`
}

type tree struct {
	Listen     string            `yaml:"listen" help:"listen"`
	Section    section           `yaml:"section"`
	Default    *Grants           `yaml:"default"`
	Namespaces []namespace       `yaml:"namespaces" help:"namespaces"`
	Rules      map[string]rule   `yaml:"rules" help:"rules"`
	Methods    map[string]string `yaml:"methods" help:"methods"`
	Logger     *strings.Builder  `yaml:"-"`
}

func defaults() tree {
	return tree{
		Listen:  "127.0.0.1:8080",
		Section: section{Count: 3, Wait: time.Second, Names: []string{"a"}},
		Default: &Grants{Subscribe: []string{"any"}, Publish: []string{"any"}},
	}
}

func keysOf(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
		case *KeyError:
			out = append(out, x.Key)
		case interface{ Unwrap() []error }:
			for _, y := range x.Unwrap() {
				walk(y)
			}
		default:
			out = append(out, "<not a KeyError: "+e.Error()+">")
		}
	}
	walk(err)
	return out
}

func TestLeaves(t *testing.T) {
	t.Parallel()
	var paths, envs []string
	for _, l := range Leaves(reflect.TypeFor[tree](), "X_") {
		paths = append(paths, l.Path)
		envs = append(envs, l.Env)
	}
	want := []string{"listen", "section.count", "section.bytes", "section.ratio", "section.on", "section.wait", "section.mode",
		"section.secret", "section.proxies", "section.names", "default.subscribe", "default.publish", "namespaces", "rules", "methods"}
	if !slices.Equal(paths, want) {
		t.Errorf("paths = %v\nwant %v", paths, want)
	}
	if envs[5] != "X_SECTION_WAIT" {
		t.Errorf("env = %s", envs[5])
	}
	var names []string
	for _, f := range Fields(reflect.TypeFor[namespace]()) {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"pattern", "subscribe", "publish"}) {
		t.Errorf("inline fields = %v", names)
	}
}

func TestDecodeYAML(t *testing.T) {
	t.Parallel()
	got := defaults()
	err := DecodeYAML(&got, []byte(`
section:
  bytes: 7
  wait: 250ms
  mode: "on"
  secret: s3cret
  proxies: [10.0.0.0/8]
default: {publish: [authenticated]}
namespaces:
  - {pattern: "a:*", subscribe: [any]}
rules:
  r: {rate: {limit: 2, per: 1s}, modes: ["on"]}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := defaults()
	want.Section.Bytes, want.Section.Wait, want.Section.Mode = 7, 250*time.Millisecond, 1
	want.Section.Secret = []byte("s3cret")
	want.Section.Proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	want.Default = &Grants{Subscribe: []string{"any"}, Publish: []string{"authenticated"}} // a section given in part keeps the rest
	want.Namespaces = []namespace{{Pattern: "a:*", Grants: Grants{Subscribe: []string{"any"}}}}
	want.Rules = map[string]rule{"r": {Modes: []mode{1}, Rate: &part{Limit: 2, Per: time.Second}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestDecodeYAMLErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give string
		want []string
	}{
		{"listn: x\nsection: {cuont: 1}\n", []string{"listn", "section.cuont"}},
		{"section: {wait: 10}\n", []string{"section.wait"}},
		{"section: {mode: maybe, bytes: -1, on: perhaps}\n", []string{"section.mode", "section.bytes", "section.on"}},
		{"section: {proxies: [10.0.0.0/8, x]}\n", []string{"section.proxies[1]"}},
		{"section: {proxies: 10.0.0.0/8}\n", []string{"section.proxies"}},
		{"section: {count: 1, count: 2}\n", []string{"section.count"}},
		{"section: 5\n", []string{"section"}},
		{"rules: {r: {rate: {limt: 1}}}\n", []string{"rules.r.rate.limt"}},
		{"namespaces: [{pattern: a, bogus: 1}]\n", []string{"namespaces[0].bogus"}},
		{"- a\n", []string{"(top level)"}},
		{"section: {hidden: 1}\n", []string{"section.hidden"}},
		{"logger: x\n", []string{"logger"}},
	}
	for _, tt := range tests {
		v := defaults()
		if got := keysOf(DecodeYAML(&v, []byte(tt.give), "f.yaml")); !slices.Equal(got, tt.want) {
			t.Errorf("%q: keys %v, want %v", tt.give, got, tt.want)
		}
	}
	v := defaults()
	err := DecodeYAML(&v, []byte("section:\n  cuont: 1\n"), "f.yaml")
	if err == nil || err.Error() != `section.cuont: unknown key (did you mean "count"?) (f.yaml:2)` {
		t.Errorf("error = %v", err)
	}
}

// An unknown key close to exactly one known key (case, or up to two
// edits) is offered that key; a far or ambiguous one gets no guess.
func TestUnknownKeyDidYouMean(t *testing.T) {
	t.Parallel()
	for give, want := range map[string]string{
		"section: {Count: 1}\n":  `section.Count: unknown key (did you mean "count"?)`,
		"section: {ratoi: 1}\n":  `section.ratoi: unknown key (did you mean "ratio"?)`,
		"lisetn: x\n":            `lisetn: unknown key (did you mean "listen"?)`,
		"section: {zzzzzz: 1}\n": `section.zzzzzz: unknown key (f.yaml:1)`,
		"section: {o: 1}\n":      `section.o: unknown key (did you mean "on"?)`,
	} {
		v := defaults()
		err := DecodeYAML(&v, []byte(give), "f.yaml")
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %s", give, err, want)
		}
	}
}

// A tab in the indentation is named, with its line, in place of the
// parser's "found character that cannot start any token".
func TestTabIndentationIsNamed(t *testing.T) {
	t.Parallel()
	v := defaults()
	err := DecodeYAML(&v, []byte("section:\n  count: 1\n\twait: 1s\n"), "f.yaml")
	var ke *KeyError
	if !errors.As(err, &ke) || !strings.Contains(ke.Msg, "line 3 is indented with a tab") || ke.Source != "f.yaml:3" {
		t.Fatalf("error = %v", err)
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	got := defaults()
	err := ApplyEnv(&got, []string{
		"X_SECTION_WAIT=2s", "X_SECTION_PROXIES=10.0.0.0/8, fd00::/8,", "X_SECTION_SECRET= a b ",
		"X_DEFAULT_PUBLISH=", "X_RULES={r: {rate: {limit: 1, per: 1m}}}", "X_LISTEN=first", "X_LISTEN=second", "OTHER=1",
	}, "X_")
	if err != nil {
		t.Fatal(err)
	}
	want := defaults()
	want.Listen = "first"
	want.Section.Wait = 2 * time.Second
	want.Section.Proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	want.Section.Secret = []byte(" a b ")
	want.Default = &Grants{Subscribe: []string{"any"}}
	want.Rules = map[string]rule{"r": {Rate: &part{Limit: 1, Per: time.Minute}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// A nil pointer section is allocated for its key.
	var zero tree
	if err := ApplyEnv(&zero, []string{"X_DEFAULT_SUBSCRIBE=a"}, "X_"); err != nil || zero.Default == nil || zero.Default.Subscribe[0] != "a" {
		t.Errorf("nil section: %v %+v", err, zero.Default)
	}
	bad := defaults()
	got2 := keysOf(ApplyEnv(&bad, []string{"X_NOPE=1", "X_SECTION_COUNT=x", "X_SECTION_PROXIES=x", "X_RULES={a: ["}, "X_"))
	if want := []string{"X_NOPE", "rules", "section.count", "section.proxies[0]"}; !slices.Equal(got2, want) {
		t.Errorf("keys = %v, want %v", got2, want)
	}
}

func TestEncodeYAMLRoundTrip(t *testing.T) {
	t.Parallel()
	v := defaults()
	v.Section.Ratio = 1e300
	v.Section.Secret = []byte("#: '\"\n")
	v.Namespaces = []namespace{{Pattern: "<<", Grants: Grants{Publish: []string{"true", "~", "null"}}}}
	v.Methods = map[string]string{"<<": "*", "a.*": "&x", "\ufeffx": "\x00"}
	v.Rules = map[string]rule{"r": {Rate: &part{Limit: 1}}, "s": {}}
	y, err := EncodeYAML(v)
	if err != nil {
		t.Fatal(err)
	}
	back := defaults()
	if err := DecodeYAML(&back, y, "print.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	y2, _ := EncodeYAML(back)
	if !bytes.Equal(y, y2) {
		t.Errorf("round trip changed it:\n%s\n---\n%s", y, y2)
	}
	if !strings.Contains(string(y), "ratio: 1e+300\n") {
		t.Errorf("unexpected form:\n%s", y)
	}
}

func TestTooComplex(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("x:\n  l0: &l0 {limit: 1}\n")
	for i := 1; i <= 11; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	b.WriteString("rules: {a: {rate: *l11}}\n")
	v := defaults()
	err := DecodeYAML(&v, []byte(b.String()), "f.yaml")
	if err == nil || !strings.Contains(err.Error(), "too complex") {
		t.Errorf("error = %v", err)
	}
}

func TestKeyLines(t *testing.T) {
	got := KeyLines([]byte("a:\n  b: 1\n  c:\n    - x\n    - {d: 2}\ne: 3\n"))
	want := map[string]int{"a": 1, "a.b": 2, "a.c": 3, "a.c[0]": 4, "a.c[1]": 5, "a.c[1].d": 5, "e": 6}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("KeyLines = %v, want %v", got, want)
	}
	if got := KeyLines([]byte("a: [\n")); got != nil {
		t.Errorf("an unparsable document mapped %v", got)
	}
}
