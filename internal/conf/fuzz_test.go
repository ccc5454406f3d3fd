package conf

import (
	"bytes"
	"reflect"
	"testing"
)

// checkKeyErrors fails unless every error in err names a key.
func checkKeyErrors(t *testing.T, err error) {
	t.Helper()
	for _, k := range keysOf(err) {
		if len(k) > 5 && k[:5] == "<not " {
			t.Fatalf("an error that names no key: %s", k)
		}
	}
}

// checkRoundTrip: a decoded value prints as YAML that decodes to a value
// printing the same.
func checkRoundTrip(t *testing.T, v tree) {
	t.Helper()
	y, err := EncodeYAML(v)
	if err != nil {
		return // a text value its MarshalText refuses (mode 7): no YAML for it
	}
	again := defaults()
	if err := DecodeYAML(&again, y, "print.yaml"); err != nil {
		t.Fatalf("reloading printed YAML: %v\n%s", err, y)
	}
	y2, err := EncodeYAML(again)
	if err != nil || !bytes.Equal(y, y2) {
		t.Fatalf("round trip changed it (%v):\n%s\n---\n%s", err, y, y2)
	}
}

// FuzzDecodeYAML: arbitrary bytes as a file never panic; they give either
// a value that survives printing, or errors that name their key.
func FuzzDecodeYAML(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("listen: :8080\nsection: {wait: 1s, mode: on, proxies: [10.0.0.0/8]}\n"))
	f.Add([]byte("section:\n  cuont: 5\n"))
	f.Add([]byte("section: {wait: 10}\n"))
	f.Add([]byte("section: {count: 1, count: 2}\n"))
	f.Add([]byte("rules: {a: {rate: {<<: {limit: 1, per: 1s}}}}, methods: {'*': a}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("listen: *nope\n"))
	f.Add([]byte("- 1\n- 2\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("section: {ratio: .nan, bytes: 18446744073709551615}\n"))
	f.Add([]byte("rules: {!!binary /w==: {modes: [on]}}\n"))
	f.Add([]byte("namespaces: [{pattern: \"\\n\", subscribe: [any]}]\ndefault: ~\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v := defaults()
		if err := DecodeYAML(&v, data, "fuzz.yaml"); err != nil {
			checkKeyErrors(t, err)
			return
		}
		checkRoundTrip(t, v)
	})
}

// FuzzApplyEnv: arbitrary values in the variables never panic; they give
// either a value that survives printing, or errors that name their key.
func FuzzApplyEnv(f *testing.F) {
	f.Add(uint8(0), "0.0.0.0:80", uint8(1), "")
	f.Add(uint8(5), "10ms", uint8(8), "10.0.0.0/8, fd00::/8")
	f.Add(uint8(13), "{r: {rate: {limit: 20, per: 1s}}}", uint8(14), `{publish: chat, "report.*": chat}`)
	f.Add(uint8(12), "[{pattern: a, subscribe: [any]}]", uint8(14), "[x]")
	f.Add(uint8(3), "1.5", uint8(2), "-1")
	f.Add(uint8(4), "maybe", uint8(255), "x")
	leaves := Leaves(typeOfTree, "X_")
	pick := func(i uint8) string {
		if int(i) < len(leaves) {
			return leaves[i].Env
		}
		return "X_NOT_A_KEY"
	}
	f.Fuzz(func(t *testing.T, i uint8, a string, j uint8, b string) {
		v := defaults()
		if err := ApplyEnv(&v, []string{pick(i) + "=" + a, pick(j) + "=" + b}, "X_"); err != nil {
			checkKeyErrors(t, err)
			return
		}
		checkRoundTrip(t, v)
	})
}

var typeOfTree = reflect.TypeFor[tree]()
