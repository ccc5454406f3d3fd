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
			errs = append(errs, &KeyError{Key: k, Msg: "unknown environment variable"})
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
