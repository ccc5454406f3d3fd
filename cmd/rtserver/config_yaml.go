package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// YAML is the configuration as a YAML document, for --print-config. Loading
// it as a --config file gives back the same Config.
func (c Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(yamlNode(reflect.ValueOf(c))); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// yamlNode builds the YAML tree of a Config value. It is written out rather
// than left to yaml.v3's Marshal because that loses some strings (a leading
// newline), prints "<<" as a merge key and large floats in exponent form.
func yamlNode(v reflect.Value) *yaml.Node {
	t := v.Type()
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch {
	case t == durationType:
		return scalar("!!str", v.Interface().(Duration).String())
	case t.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := range t.NumField() {
			f := t.Field(i)
			fv := v.Field(i)
			if strings.HasSuffix(f.Tag.Get("yaml"), ",omitempty") && fv.IsZero() {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", yamlName(f)), yamlNode(fv))
		}
		return n
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			return scalar("!!null", "null")
		}
		return yamlNode(v.Elem())
	case t.Kind() == reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, yamlNode(k), yamlNode(v.MapIndex(k)))
		}
		if len(keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case t.Kind() == reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			n.Content = append(n.Content, yamlNode(v.Index(i)))
		}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case t.Kind() == reflect.String:
		s := v.String()
		switch {
		case !utf8.ValidString(s):
			return scalar("", s) // yaml.v3 writes it as !!binary, which reads back
		case !plainASCII(s) || s == "<<": // yaml.v3 would write "<<" bare: a merge key
			n := scalar("!!str", s)
			n.Style = yaml.DoubleQuotedStyle
			return n
		}
		return scalar("!!str", s) // quoted by yaml.v3 when it would read as another type
	case t.Kind() == reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case t.Kind() == reflect.Float64:
		return scalar("", formatFloat(v.Float()))
	}
	panic("config: yamlNode: unhandled type " + t.String())
}

// formatFloat writes f so that YAML reads it back as the same float64, in
// plain decimals when that is short (10485760, not 1.048576e+07).
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	if s := strconv.FormatFloat(f, 'f', -1, 64); len(s) <= 24 {
		return s
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// plainASCII reports whether s can be written unquoted or single-quoted
// without surprises: printable ASCII with no surrounding spaces.
func plainASCII(s string) bool {
	if s != strings.TrimSpace(s) {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// ---- the YAML file -------------------------------------------------------

// maxNodeVisits bounds the work of decoding one document: aliases and merge
// keys can make a small file describe an exponentially large tree.
const maxNodeVisits = 20_000

func decodeFile(cfg *Config, data []byte, name string) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: defaults
		}
		return &KeyError{Key: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return &KeyError{Key: name, Msg: "want one YAML document"}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	d := &nodeDecoder{file: name}
	if err := d.decode(doc.Content[0], reflect.ValueOf(cfg).Elem(), ""); err != nil {
		return err
	}
	if len(d.errs) > 0 {
		return errors.Join(d.errs...)
	}
	// The walk above is the decoder; yaml.v3's own strict decode is a second
	// opinion, so no key the walk might have missed is silently ignored.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var shadow Config
	if err := strict.Decode(&shadow); err != nil {
		return &KeyError{Key: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	return nil
}

// nodeDecoder decodes a yaml.Node into a Config (sub)value along the struct
// tree, so an unknown key or a bad value is reported with its key path.
type nodeDecoder struct {
	file   string // file name for positions; "" for environment values
	env    string // the environment variable, for values from the environment
	visits int
	errs   []error
}

func (d *nodeDecoder) fail(key string, n *yaml.Node, msg string) {
	src := d.env
	if d.file != "" {
		src = d.file + ":" + strconv.Itoa(n.Line)
	}
	d.errs = append(d.errs, &KeyError{Key: key, Msg: msg, Source: src})
}

var errTooComplex = errors.New("document too complex (aliases or merge keys expand past 20000 nodes)")

// decode sets v from n. It returns an error only when it must stop (too
// complex); per-key problems are collected in d.errs.
func (d *nodeDecoder) decode(n *yaml.Node, v reflect.Value, key string) error {
	for n.Kind == yaml.AliasNode {
		if d.visits++; d.visits > maxNodeVisits || n.Alias == nil {
			return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
		}
		n = n.Alias
	}
	if d.visits++; d.visits > maxNodeVisits {
		return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
	}
	isNull := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
	t := v.Type()
	switch {
	case t.Kind() == reflect.Struct && t != durationType:
		if isNull {
			return nil // an empty section keeps its defaults
		}
		if n.Kind != yaml.MappingNode {
			d.fail(d.whole(key), n, "want a mapping")
			return nil
		}
		return d.mapping(n, key, func(k string, kn, vn *yaml.Node) error {
			f, ok := fieldByYAMLName(t, k)
			if !ok {
				d.fail(join(key, k), kn, "unknown key")
				return nil
			}
			return d.decode(vn, v.FieldByIndex(f.Index), join(key, k))
		})
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if isNull {
			v.SetZero()
			return nil
		}
		nv := reflect.New(t.Elem())
		if err := d.decode(n, nv.Elem(), key); err != nil {
			return err
		}
		v.Set(nv) // replaces, never merges into, an earlier value
		return nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		// A list of sections (topics.namespaces): each element is decoded
		// like a section, so its problems name the key with its index.
		if isNull {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(d.whole(key), n, "want a list")
			return nil
		}
		list := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, en := range n.Content {
			if err := d.decode(en, list.Index(i), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
		v.Set(list) // a list replaces the default (or file) list
		return nil
	case t.Kind() == reflect.Map:
		if isNull {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.MappingNode {
			d.fail(d.whole(key), n, "want a mapping")
			return nil
		}
		m := reflect.MakeMap(t)
		err := d.mapping(n, key, func(k string, kn, vn *yaml.Node) error {
			ev := reflect.New(t.Elem()).Elem()
			if err := d.decode(vn, ev, join(key, k)); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k), ev)
			return nil
		})
		v.Set(m) // a map replaces the default map
		return err
	default:
		if isNull {
			v.SetZero()
			return nil
		}
		nv := reflect.New(t)
		if err := n.Decode(nv.Interface()); err != nil {
			d.fail(d.whole(key), n, valueMsg(t, n, err))
			return nil
		}
		v.Set(nv.Elem())
		return nil
	}
}

// whole is key, or "(top level)" for the document itself.
func (d *nodeDecoder) whole(key string) string {
	if key == "" {
		return "(top level)"
	}
	return key
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// mapping calls set for each pair of a mapping node: merged mappings (<<)
// first, then the explicit keys, which override them; a key given twice
// explicitly is an error.
func (d *nodeDecoder) mapping(n *yaml.Node, key string, set func(k string, kn, vn *yaml.Node) error) error {
	if d.visits++; d.visits > maxNodeVisits {
		return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for pass := range 2 {
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			isMerge := kn.Kind == yaml.ScalarNode && kn.ShortTag() == "!!merge"
			switch {
			case pass == 0 && isMerge:
				if err := d.merge(vn, key, set); err != nil {
					return err
				}
			case pass == 1 && !isMerge:
				var k string
				if kn.Kind != yaml.ScalarNode || kn.Decode(&k) != nil {
					d.fail(d.whole(key), kn, "keys must be strings")
					continue
				}
				if seen[k] {
					d.fail(join(key, k), kn, "duplicate key")
					continue
				}
				seen[k] = true
				if err := set(k, kn, vn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// merge applies a << value: a mapping, or a sequence of mappings where
// earlier ones win.
func (d *nodeDecoder) merge(vn *yaml.Node, key string, set func(k string, kn, vn *yaml.Node) error) error {
	for vn.Kind == yaml.AliasNode && vn.Alias != nil {
		if d.visits++; d.visits > maxNodeVisits {
			return &KeyError{Key: d.whole(key), Msg: errTooComplex.Error()}
		}
		vn = vn.Alias
	}
	switch vn.Kind {
	case yaml.MappingNode:
		return d.mapping(vn, key, set)
	case yaml.SequenceNode:
		for i := len(vn.Content) - 1; i >= 0; i-- {
			m := vn.Content[i]
			for m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			if m.Kind != yaml.MappingNode {
				d.fail(d.whole(key), vn, "<< wants a mapping or a list of mappings")
				return nil
			}
			if err := d.mapping(m, key, set); err != nil {
				return err
			}
		}
		return nil
	}
	d.fail(d.whole(key), vn, "<< wants a mapping or a list of mappings")
	return nil
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// valueMsg explains a value that does not fit its key's type.
func valueMsg(t reflect.Type, n *yaml.Node, err error) string {
	if t == durationType {
		return err.Error()
	}
	got := n.Value
	if n.Kind != yaml.ScalarNode {
		got = map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[n.Kind]
		return "want " + typeWord(t) + ", got " + got
	}
	return fmt.Sprintf("want %s, got %q", typeWord(t), got)
}

func typeWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a Go duration such as 10ms or 2s"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "an integer"
	case t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice:
		return "a list of " + strings.TrimPrefix(typeWord(t.Elem()), "a ") + "s"
	case t.Kind() == reflect.Map:
		return "a mapping"
	}
	return t.String()
}
