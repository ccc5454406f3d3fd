package conf

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// KeyError is an invalid or unknown configuration key. Validate functions,
// the YAML decoder and the environment return these, or an errors.Join of
// them, so an operator sees every offending key at once.
type KeyError struct {
	Key    string // key path such as handshake.tick, or an unknown variable
	Msg    string // what is wrong
	Source string // where the value came from: "FILE:LINE" or the variable; "" for the merged result
}

func (e *KeyError) Error() string {
	if e.Source == "" {
		return e.Key + ": " + e.Msg
	}
	return e.Key + ": " + e.Msg + " (" + e.Source + ")"
}

// Problems collects KeyErrors for a Validate function.
type Problems struct{ errs []error }

// Add records a problem with key.
func (p *Problems) Add(key, format string, args ...any) {
	p.errs = append(p.errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Join records every error of err (nil adds nothing).
func (p *Problems) Join(err error) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		p.errs = append(p.errs, j.Unwrap()...)
		return
	}
	p.errs = append(p.errs, err)
}

// NonNegative records that key must not be negative, when n is.
func (p *Problems) NonNegative(key string, n int64) {
	if n < 0 {
		p.Add(key, "must not be negative, got %d", n)
	}
}

// NonNegativeDuration records that key must not be negative, when d is.
func (p *Problems) NonNegativeDuration(key string, d time.Duration) {
	if d < 0 {
		p.Add(key, "must not be negative, got %s", d)
	}
}

// Positive records that key must be positive, when n is not.
func (p *Problems) Positive(key string, n int64) {
	if n <= 0 {
		p.Add(key, "must be positive, got %d", n)
	}
}

// PositiveDuration records that key must be a positive duration, when d
// is not.
func (p *Problems) PositiveDuration(key string, d time.Duration) {
	if d <= 0 {
		p.Add(key, "must be a positive duration, got %s", d)
	}
}

// Err is the errors.Join of every problem, or nil.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// Leaf is one settable key of a configuration tree: a scalar, a list or a
// map.
type Leaf struct {
	Path  string // yaml key path, e.g. handshake.perIP.limit
	Env   string // environment variable, e.g. RTSERVER_HANDSHAKE_PERIP_LIMIT
	Help  string // the help tag
	Index []int  // field index path from the root (through pointers)
	Type  reflect.Type
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	bytesType           = reflect.TypeFor[[]byte]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// isText reports whether t is written as a string through its text
// methods.
func isText(t reflect.Type) bool {
	return t.Implements(textMarshalerType) && reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// isSection reports whether a field of type t holds keys of its own: a
// struct, or a pointer to one, that is not a scalar.
func isSection(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != durationType && !isText(t)
}

// Field is one yaml-tagged field of a struct, with inline fields expanded.
type Field struct {
	Name      string // yaml name
	Help      string
	Index     []int
	Type      reflect.Type
	OmitEmpty bool
}

// Fields lists the keys of struct type t in declaration order: fields
// whose yaml name is "-", and untagged unexported ones, are left out, inline structs
// are expanded in place.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("yaml")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			for _, sub := range Fields(f.Type) {
				sub.Index = append([]int{i}, sub.Index...)
				out = append(out, sub)
			}
			continue
		}
		if !ok || name == "" {
			panic("conf: field " + t.String() + "." + f.Name + " has no yaml name; tag it, or yaml:\"-\"")
		}
		out = append(out, Field{
			Name:      name,
			Help:      f.Tag.Get("help"),
			Index:     []int{i},
			Type:      f.Type,
			OmitEmpty: strings.Contains(","+opts+",", ",omitempty,"),
		})
	}
	return out
}

// Leaves lists every key of the struct type t in declaration order, with
// environment names of envPrefix + the upper-cased path joined by "_".
func Leaves(t reflect.Type, envPrefix string) []Leaf {
	var out []Leaf
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for _, f := range Fields(t) {
			p := prefix + f.Name
			idx := append(slices.Clone(index), f.Index...)
			if isSection(f.Type) {
				walk(f.Type, p+".", idx)
				continue
			}
			out = append(out, Leaf{
				Path:  p,
				Env:   envPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_")),
				Help:  f.Help,
				Index: idx,
				Type:  f.Type,
			})
		}
	}
	walk(t, "", nil)
	return out
}

// fieldAt is v's field at index, allocating nil pointers on the way.
func fieldAt(v reflect.Value, index []int) reflect.Value {
	for _, i := range index {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v
}

// ValueAt is v's field at index, or the zero value of its type when a
// pointer on the way is nil.
func ValueAt(v reflect.Value, l Leaf) reflect.Value {
	for _, i := range l.Index {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Zero(l.Type)
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v
}

// typeWord names what a value of t must look like.
func typeWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a Go duration such as 10ms or 2s"
	case t == bytesType, isText(t):
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "an integer"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "a non-negative integer"
	case t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeWord(t.Elem()), "a "), "an ") + "s"
	case t.Kind() == reflect.Map:
		return "a mapping"
	}
	return t.String()
}
