package main

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

// ---- schema: the leaves of the Config tree -------------------------------

// configLeaf is one settable key: a scalar, a list or a map.
type configLeaf struct {
	path  string // yaml key path, e.g. handshake.perIP.limit
	env   string // RTSERVER_HANDSHAKE_PERIP_LIMIT
	help  string
	index []int // reflect field index path from Config
	typ   reflect.Type
}

var durationType = reflect.TypeFor[Duration]()

// configLeaves lists every key of Config in declaration order.
var configLeaves = func() []configLeaf {
	var out []configLeaf
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			p := prefix + yamlName(f)
			idx := append(slices.Clone(index), i)
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(f.Type, p+".", idx)
				continue
			}
			out = append(out, configLeaf{
				path:  p,
				env:   envName(p),
				help:  f.Tag.Get("help"),
				index: idx,
				typ:   f.Type,
			})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}()

func envName(keyPath string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(keyPath, ".", "_"))
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// ---- the environment -----------------------------------------------------

var leafByEnv = func() map[string]*configLeaf {
	m := make(map[string]*configLeaf, len(configLeaves))
	for i := range configLeaves {
		m[configLeaves[i].env] = &configLeaves[i]
	}
	return m
}()

// applyEnv applies the RTSERVER_* variables of environ. When a name occurs
// twice the first one counts, as with os.Getenv.
func applyEnv(cfg *Config, environ []string) error {
	vals := make(map[string]string)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, envPrefix) {
			continue
		}
		if _, dup := vals[k]; !dup {
			vals[k] = v
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		leaf, ok := leafByEnv[k]
		if !ok {
			errs = append(errs, &KeyError{Key: k, Msg: "unknown environment variable"})
			continue
		}
		errs = append(errs, setFromString(reflect.ValueOf(cfg).Elem().FieldByIndex(leaf.index), vals[k], leaf.path, k)...)
	}
	return errors.Join(errs...)
}

// setFromString sets a leaf from an environment value: scalars literally
// (strings are taken as they are, with no quoting or trimming), lists comma
// separated, maps and lists of sections as a YAML flow value.
func setFromString(v reflect.Value, s, key, env string) []error {
	bad := func(msg string) []error { return []error{&KeyError{Key: key, Msg: msg, Source: env}} }
	t := v.Type()
	trimmed := strings.TrimSpace(s)
	switch {
	case t == durationType:
		d, err := parseDuration(s)
		if err != nil {
			return bad(err.Error())
		}
		v.Set(reflect.ValueOf(d))
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
	case t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(trimmed, 64)
		if err != nil {
			return bad(fmt.Sprintf("want a number, got %q", s))
		}
		v.SetFloat(f)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		var list []string
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
	case t.Kind() == reflect.Map, t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
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
