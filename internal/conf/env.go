package conf

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ApplyEnv applies the variables of environ (os.Environ's form) whose
// names start with prefix to dst (a pointer to a struct), by the names of
// Leaves(dst's type, prefix). An unknown name with the prefix is an error.
// When a name occurs twice the first one counts, as with os.Getenv.
//
// Scalars are taken literally (strings with no quoting or trimming), lists
// of scalars comma separated, maps and lists of sections as a YAML flow
// value.
func ApplyEnv(dst any, environ []string, prefix string) error {
	root := reflect.ValueOf(dst).Elem()
	byEnv := map[string]Leaf{}
	for _, l := range Leaves(root.Type(), prefix) {
		byEnv[l.Env] = l
	}
	vals := make(map[string]string)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		if _, dup := vals[k]; !dup {
			vals[k] = v
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		leaf, ok := byEnv[k]
		if !ok {
			msg := "unknown environment variable"
			if near := nearestEnv(k, byEnv); near != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", near)
			}
			errs = append(errs, &KeyError{Key: k, Msg: msg})
			continue
		}
		errs = append(errs, setFromString(fieldAt(root, leaf.Index), vals[k], leaf.Path, k)...)
	}
	return errors.Join(errs...)
}

func setFromString(v reflect.Value, s, key, env string) []error {
	bad := func(msg string) []error { return []error{&KeyError{Key: key, Msg: msg, Source: env}} }
	t := v.Type()
	trimmed := strings.TrimSpace(s)
	switch {
	case t == durationType || t == bytesType || isText(t):
		if err := setText(v, s); err != nil {
			return bad(err.Error())
		}
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(trimmed)
		if err != nil {
			return bad(fmt.Sprintf("want true or false, got %q", s))
		}
		v.SetBool(b)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		i, err := strconv.ParseInt(trimmed, 10, t.Bits())
		if err != nil {
			return bad(fmt.Sprintf("want an integer, got %q", s))
		}
		v.SetInt(i)
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		i, err := strconv.ParseUint(trimmed, 10, t.Bits())
		if err != nil {
			return bad(fmt.Sprintf("want a non-negative integer, got %q", s))
		}
		v.SetUint(i)
	case t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(trimmed, 64)
		if err != nil {
			return bad(fmt.Sprintf("want a number, got %q", s))
		}
		v.SetFloat(f)
	case t.Kind() == reflect.Slice && !isSection(t.Elem()):
		list := reflect.MakeSlice(t, 0, 0)
		var errs []error
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				ev := reflect.New(t.Elem()).Elem()
				errs = append(errs, setFromString(ev, item, fmt.Sprintf("%s[%d]", key, list.Len()), env)...)
				list = reflect.Append(list, ev)
			}
		}
		if list.Len() == 0 {
			list = reflect.Zero(t)
		}
		v.Set(list)
		return errs
	case t.Kind() == reflect.Map, t.Kind() == reflect.Slice:
		if trimmed == "" {
			v.SetZero()
			return nil
		}
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
			want := "a YAML flow mapping such as {a: b}"
			if t.Kind() == reflect.Slice {
				want = "a YAML flow list such as [{a: b}]"
			}
			return bad("want " + want + ": " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 {
			v.SetZero()
			return nil
		}
		d := &nodeDecoder{env: env}
		if err := d.decode(doc.Content[0], v, key); err != nil {
			return []error{err}
		}
		return d.errs
	default:
		return bad("cannot be set from the environment")
	}
	return nil
}

// nearestEnv is the variable name closest to a misspelt k, or "" when
// none is close or two are equally close. Underscores cost nothing: the
// usual slip is one inside a camelCase key (RTSERVER_HANDSHAKE_MAX_CONNECTIONS
// for RTSERVER_HANDSHAKE_MAXCONNECTIONS), or one missing between sections.
func nearestEnv(k string, byEnv map[string]Leaf) string {
	if len(k) > 128 {
		return "" // no variable name is this long
	}
	squash := func(s string) string { return strings.ReplaceAll(s, "_", "") }
	best, bestDist, tie := "", 3, false
	for _, name := range slices.Sorted(maps.Keys(byEnv)) {
		d := editDistance(squash(k), squash(name))
		switch {
		case d < bestDist:
			best, bestDist, tie = name, d, false
		case d == bestDist && best != "":
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}
