package main

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/conf"
)

// zeroMeans finds what a key's help says its zero or empty value stands
// for: "0 = 16", "0 = 1s", "empty: rt:", "empty: 127.0.0.1:8080".
var zeroMeans = regexp.MustCompile(`(?:^|[;(,] )(?:0 = |empty: )([^;,)\s]+)(?: (KiB|MiB|GiB)\b)?`)

// value reports whether a help's word is a value (a number, a duration,
// an address, a prefix) rather than a meaning ("off", "none", "no cap").
var value = regexp.MustCompile(`^[0-9][0-9a-zµ.:]*$|^[a-z]+:$`)

// Every key whose help says which value its zero (or empty) value stands
// for names the value DefaultConfig gives it: each default is a named
// constant used by DefaultConfig, by the path that fills a zero value and,
// through this test, by the help text.
func TestEveryHelpNamesTheDefaultTheCodeApplies(t *testing.T) {
	def := reflect.ValueOf(rtserver.DefaultConfig())
	checked := 0
	for _, l := range configLeaves {
		m := zeroMeans.FindStringSubmatch(l.Help)
		if m == nil || !value.MatchString(m[1]) {
			continue
		}
		got, ok := printed(conf.ValueAt(def, l))
		if !ok {
			continue
		}
		checked++
		want := strings.TrimSuffix(m[1], ".")
		if m[2] != "" { // a size in binary units
			n, err := strconv.ParseInt(want, 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", l.Path, m[0], err)
			}
			want = strconv.FormatInt(n<<map[string]int{"KiB": 10, "MiB": 20, "GiB": 30}[m[2]], 10)
		}
		if !same(got, want) {
			t.Errorf("%s: help says %q stands for %s, DefaultConfig gives %s", l.Path, m[0], want, got)
		}
	}
	t.Logf("%d keys name the value their zero stands for", checked)
	if checked < 15 {
		t.Errorf("only %d keys checked: the help texts' wording changed?", checked)
	}
}

// same compares two printed values, durations by what they mean (2m is
// 2m0s).
func same(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	if errA == nil && errB == nil {
		return da == db
	}
	return a == b
}

// printed is a scalar default as the reference prints it.
func printed(v reflect.Value) (string, bool) {
	if s, ok := conf.Scalar(v); ok {
		return s, true
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprint(v.Interface()), true
	case reflect.Float64:
		return conf.FormatFloat(v.Float()), true
	}
	return "", false
}
