package conf

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
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// EncodeYAML writes v (a struct or a pointer to one) as a YAML document
// that DecodeYAML reads back to the same value.
func EncodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	n, err := yamlNode(reflect.ValueOf(v))
	if err != nil {
		return nil, err
	}
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Scalar is how a leaf value is written in YAML and in the reference: a
// duration as a Go duration string, bytes as a string, a text type by its
// MarshalText.
func Scalar(v reflect.Value) (string, bool) {
	t := v.Type()
	switch {
	case t == durationType:
		return time.Duration(v.Int()).String(), true
	case t == bytesType:
		return string(v.Bytes()), true
	case isText(t):
		b, err := v.Interface().(interface{ MarshalText() ([]byte, error) }).MarshalText()
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	return "", false
}

// yamlNode builds the YAML tree of a value. It is written out rather than
// left to yaml.v3's Marshal because that loses some strings (a leading
// newline), prints "<<" as a merge key and large floats in exponent form.
func yamlNode(v reflect.Value) (*yaml.Node, error) {
	t := v.Type()
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	if s, ok := Scalar(v); ok {
		return yamlString(s), nil
	} else if isText(t) || t == durationType || t == bytesType {
		return nil, fmt.Errorf("conf: cannot print %v", v.Interface())
	}
	switch t.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, f := range Fields(t) {
			fv := v.FieldByIndex(f.Index)
			if f.OmitEmpty && fv.IsZero() {
				continue
			}
			c, err := yamlNode(fv)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, scalar("!!str", f.Name), c)
		}
		return n, nil
	case reflect.Pointer:
		if v.IsNil() {
			return scalar("!!null", "null"), nil
		}
		return yamlNode(v.Elem())
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			c, err := yamlNode(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, yamlString(k.String()), c)
		}
		if len(keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n, nil
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			c, err := yamlNode(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		return n, nil
	case reflect.String:
		return yamlString(v.String()), nil
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool())), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar("!!int", strconv.FormatUint(v.Uint(), 10)), nil
	case reflect.Float64:
		return scalar("", FormatFloat(v.Float())), nil
	}
	return nil, fmt.Errorf("conf: cannot print a %s", t)
}

func yamlString(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	switch {
	case !utf8.ValidString(s):
		n.Tag = "" // yaml.v3 writes it as !!binary, which reads back
	case !plainASCII(s) || s == "<<": // yaml.v3 would write "<<" bare: a merge key
		n.Style = yaml.DoubleQuotedStyle
	}
	return n // otherwise quoted by yaml.v3 when it would read as another type
}

// FormatFloat writes f so that YAML reads it back as the same float64, in
// plain decimals when that is short (10485760, not 1.048576e+07).
func FormatFloat(f float64) string {
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

// DecodeYAML decodes one YAML document into dst (a pointer to a struct)
// strictly: an unknown key, a key given twice or a value of the wrong type
// is a *KeyError naming the key path and FILE:LINE; every problem is
// reported at once. Sections absent from the file keep dst's values; a
// list or map given replaces dst's. An empty document changes nothing.
func DecodeYAML(dst any, data []byte, name string) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: defaults
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if line := tabIndentedLine(data); line > 0 {
			// The parser's own words ("found character that cannot
			// start any token") do not say what is wrong.
			return &KeyError{Key: name, Source: name + ":" + strconv.Itoa(line),
				Msg: "line " + strconv.Itoa(line) + " is indented with a tab; YAML indents with spaces only (" + msg + ")"}
		}
		return &KeyError{Key: name, Msg: msg}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return &KeyError{Key: name, Msg: "want one YAML document"}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	d := &nodeDecoder{file: name}
	if err := d.decode(doc.Content[0], reflect.ValueOf(dst).Elem(), ""); err != nil {
		return err
	}
	return errors.Join(d.errs...)
}

// nodeDecoder decodes a yaml.Node into a struct (sub)value along the
// struct tree, so an unknown key or a bad value is reported with its key
// path.
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

func (d *nodeDecoder) tooComplex(key string) error {
	return &KeyError{Key: whole(key), Msg: "document too complex (aliases or merge keys expand past 20000 nodes)"}
}

// decode sets v from n. It returns an error only when it must stop (too
// complex); per-key problems are collected in d.errs.
func (d *nodeDecoder) decode(n *yaml.Node, v reflect.Value, key string) error {
	for n.Kind == yaml.AliasNode {
		if d.visits++; d.visits > maxNodeVisits || n.Alias == nil {
			return d.tooComplex(key)
		}
		n = n.Alias
	}
	if d.visits++; d.visits > maxNodeVisits {
		return d.tooComplex(key)
	}
	isNull := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
	t := v.Type()
	switch {
	case isSection(t) && t.Kind() == reflect.Struct:
		if isNull {
			return nil // an empty section keeps its values
		}
		if n.Kind != yaml.MappingNode {
			d.fail(whole(key), n, "want a mapping")
			return nil
		}
		fields := Fields(t)
		return d.mapping(n, key, func(k string, kn, vn *yaml.Node) error {
			i := slices.IndexFunc(fields, func(f Field) bool { return f.Name == k })
			if i < 0 {
				msg := "unknown key"
				if near := nearestName(k, fields); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				}
				d.fail(join(key, k), kn, msg)
				return nil
			}
			return d.decode(vn, v.FieldByIndex(fields[i].Index), join(key, k))
		})
	case isSection(t): // a pointer to a section
		if isNull {
			v.SetZero()
			return nil
		}
		nv := reflect.New(t.Elem())
		if !v.IsNil() {
			nv.Elem().Set(v.Elem()) // a copy: the old value may be shared
		}
		if err := d.decode(n, nv.Elem(), key); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	case t.Kind() == reflect.Slice && t != bytesType:
		if isNull {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(whole(key), n, "want "+typeWord(t)+", got "+nodeWord(n))
			return nil
		}
		list := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, en := range n.Content {
			if err := d.decode(en, list.Index(i), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
		v.Set(list) // a list replaces the earlier list
		return nil
	case t.Kind() == reflect.Map:
		if isNull {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.MappingNode {
			d.fail(whole(key), n, "want a mapping")
			return nil
		}
		m := reflect.MakeMap(t)
		err := d.mapping(n, key, func(k string, kn, vn *yaml.Node) error {
			ev := reflect.New(t.Elem()).Elem()
			if err := d.decode(vn, ev, join(key, k)); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
			return nil
		})
		v.Set(m) // a map replaces the earlier map
		return err
	default:
		if isNull {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.ScalarNode {
			d.fail(whole(key), n, "want "+typeWord(t)+", got "+nodeWord(n))
			return nil
		}
		if t == durationType || t == bytesType || isText(t) {
			if err := setText(v, n.Value); err != nil {
				d.fail(whole(key), n, err.Error())
			}
			return nil
		}
		nv := reflect.New(t)
		if err := n.Decode(nv.Interface()); err != nil {
			d.fail(whole(key), n, fmt.Sprintf("want %s, got %q", typeWord(t), n.Value))
			return nil
		}
		v.Set(nv.Elem())
		return nil
	}
}

// setText sets a duration, bytes or text value from its string form.
func setText(v reflect.Value, s string) error {
	t := v.Type()
	switch {
	case t == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a Go duration such as 10ms or 2s, got %q", s)
		}
		v.SetInt(int64(d))
	case t == bytesType:
		v.SetBytes([]byte(s))
	default:
		nv := reflect.New(t)
		if err := nv.Interface().(interface{ UnmarshalText([]byte) error }).UnmarshalText([]byte(s)); err != nil {
			return fmt.Errorf("invalid value %q: %v", s, err)
		}
		v.Set(nv.Elem())
	}
	return nil
}

func nodeWord(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// whole is key, or "(top level)" for the document itself.
func whole(key string) string {
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
		return d.tooComplex(key)
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
					d.fail(whole(key), kn, "keys must be strings")
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
			return d.tooComplex(key)
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
				d.fail(whole(key), vn, "<< wants a mapping or a list of mappings")
				return nil
			}
			if err := d.mapping(m, key, set); err != nil {
				return err
			}
		}
		return nil
	}
	d.fail(whole(key), vn, "<< wants a mapping or a list of mappings")
	return nil
}

// tabIndentedLine is the first line (1-based) whose indentation holds a
// tab, or 0.
func tabIndentedLine(data []byte) int {
	for i, line := range bytes.Split(data, []byte("\n")) {
		indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		if bytes.IndexByte(indent, '\t') >= 0 && len(bytes.TrimSpace(line)) > 0 {
			return i + 1
		}
	}
	return 0
}

// nearestName is the one field name close to k (the same but for case,
// or at most two edits away when k is longer than four characters), or
// "" when none is, or when two are equally close.
func nearestName(k string, fields []Field) string {
	if len(k) > 64 {
		return "" // no field name is this long
	}
	best, bestDist, tie := "", 3, false
	if len(k) <= 4 {
		bestDist = 2
	}
	for _, f := range fields {
		d := editDistance(strings.ToLower(k), strings.ToLower(f.Name))
		switch {
		case d < bestDist:
			best, bestDist, tie = f.Name, d, false
		case d == bestDist && best != "":
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// KeyLines maps each key path of a YAML document to the line it is on
// ("limits.maxMessageBytes", "handshake.trustedProxies[0]"), so that a
// problem found after decoding (validation) can name where the value came
// from. Anchors and merge keys are not followed: their keys are named
// where they are written. An unparsable document maps nothing.
func KeyLines(data []byte) map[string]int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	lines := map[string]int{}
	var walk func(n *yaml.Node, key string, depth int)
	walk = func(n *yaml.Node, key string, depth int) {
		if depth > 64 || len(lines) > 20000 {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := join(key, n.Content[i].Value)
				lines[k] = n.Content[i].Line
				walk(n.Content[i+1], k, depth+1)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				k := key + "[" + strconv.Itoa(i) + "]"
				lines[k] = c.Line
				walk(c, k, depth+1)
			}
		}
	}
	walk(doc.Content[0], "", 0)
	return lines
}
