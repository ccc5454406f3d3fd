package publishrate

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unsafe"
)

// parseEnvelope fills e from body, an envelope's JSON, as json.Unmarshal
// would, except that member names match exactly (json.Unmarshal also
// takes "Slice" or "SLICE" for "slice"; here those are unknown members
// and ignored, like any other). It exists because receiving envelopes is
// the aggregator's steady work: with every instance's slice reaching every
// instance, json.Unmarshal's reflection was most of the cost of an
// envelope. The whole body is checked to be one valid JSON value, unknown
// members included, as json.Unmarshal checks it. FuzzParseEnvelope holds
// it to json.Unmarshal.
func parseEnvelope(body []byte, e *envelope) error {
	return parseEnvelopeShared(body, e, false)
}

// parseEnvelopeShared is parseEnvelope that, when shared is set, returns
// the strings of e (topics, users) as views of body rather than copies:
// body must then never change again (a received payload, or the copy
// verify made). That is about sixty allocations fewer per envelope
// received. The instance id is always copied: the aggregator keeps it as
// a map key for longer than it keeps the envelope.
func parseEnvelopeShared(body []byte, e *envelope, shared bool) error {
	p := jsonParser{d: body, shared: shared}
	p.space()
	if err := p.object(func(name []byte) error {
		switch string(name) {
		case "v":
			return p.intInto(&e.V)
		case "instanceId":
			if err := p.stringInto(&e.InstanceID); err != nil {
				return err
			}
			e.InstanceID = strings.Clone(e.InstanceID)
			return nil
		case "ts":
			return p.int64Into(&e.TS)
		case "epoch":
			return p.int64Into(&e.Epoch)
		case "instances":
			return p.intInto(&e.Instances)
		case "slice":
			return arrayInto(&p, &e.Slice, func(w *wireTopic) error {
				return p.object(func(name []byte) error {
					switch string(name) {
					case "topic":
						return p.stringInto(&w.Topic)
					case "messagesPerSec":
						return p.floatInto(&w.MessagesPerSec)
					case "bytesPerSec":
						return p.floatInto(&w.BytesPerSec)
					case "instances":
						return p.intInto(&w.Instances)
					}
					return p.skip(3)
				})
			})
		case "users":
			return arrayInto(&p, &e.Users, func(w *wireUser) error {
				return p.object(func(name []byte) error {
					switch string(name) {
					case "user":
						return p.stringInto(&w.User)
					case "messagesPerSec":
						return p.floatInto(&w.MessagesPerSec)
					}
					return p.skip(3)
				})
			})
		case "subs":
			return arrayInto(&p, &e.Subs, func(w *wireSub) error {
				return p.object(func(name []byte) error {
					switch string(name) {
					case "topic":
						return p.stringInto(&w.Topic)
					case "count":
						return p.intInto(&w.Count)
					}
					return p.skip(3)
				})
			})
		}
		return p.skip(1)
	}); err != nil {
		return err
	}
	if p.space(); p.i != len(p.d) {
		return errSyntax
	}
	return nil
}

var errSyntax = errors.New("invalid JSON")

// maxDepth is json.Unmarshal's nesting limit.
const maxDepth = 10000

type jsonParser struct {
	d []byte
	i int
	// shared: d never changes, so a string without escapes may be a
	// view of it (see parseEnvelopeShared).
	shared bool
}

func (p *jsonParser) space() {
	for p.i < len(p.d) {
		switch p.d[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// null consumes a null literal, if that is what comes next.
func (p *jsonParser) null() bool {
	if len(p.d)-p.i >= 4 && string(p.d[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// object parses an object (or null, which leaves everything as it is),
// calling member with each member's name positioned at its value. The
// parser is at the value's first byte, past any space.
func (p *jsonParser) object(member func(name []byte) error) error {
	if p.null() {
		return nil
	}
	if p.i >= len(p.d) || p.d[p.i] != '{' {
		return errSyntax
	}
	p.i++
	p.space()
	if p.i < len(p.d) && p.d[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		p.space()
		name, err := p.stringBytes()
		if err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.d) || p.d[p.i] != ':' {
			return errSyntax
		}
		p.i++
		p.space()
		if err := member(name); err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.d) {
			return errSyntax
		}
		switch p.d[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// arrayInto parses an array of objects into *dst, replacing it as
// json.Unmarshal does: null makes it nil, [] makes it empty, not nil.
func arrayInto[T any](p *jsonParser, dst *[]T, elem func(*T) error) error {
	if p.null() {
		*dst = nil
		return nil
	}
	if p.i >= len(p.d) || p.d[p.i] != '[' {
		return errSyntax
	}
	p.i++
	out := make([]T, 0, 32) // a default envelope's lists (20) in one allocation
	p.space()
	if p.i < len(p.d) && p.d[p.i] == ']' {
		p.i++
		*dst = out
		return nil
	}
	for {
		p.space()
		out = append(out, *new(T))
		if err := elem(&out[len(out)-1]); err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.d) {
			return errSyntax
		}
		switch p.d[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			*dst = out
			return nil
		default:
			return errSyntax
		}
	}
}

// string parses a string.
func (p *jsonParser) string() (string, error) {
	start := p.i
	b, err := p.stringBytes()
	if err == nil && p.shared && len(b) > 0 && p.i-start == len(b)+2 {
		// The input's own bytes (no escapes), which never change.
		return unsafe.String(&b[0], len(b)), nil
	}
	return string(b), err
}

// stringBytes parses a string. Plain ASCII without escapes is the input's
// own bytes, not copied; anything else is handed to json.Unmarshal, so
// escapes and invalid UTF-8 come out exactly as it decodes them.
func (p *jsonParser) stringBytes() ([]byte, error) {
	if p.i >= len(p.d) || p.d[p.i] != '"' {
		return nil, errSyntax
	}
	start := p.i
	plain := true
	for p.i++; p.i < len(p.d); p.i++ {
		switch c := p.d[p.i]; {
		case c == '"':
			p.i++
			if plain {
				return p.d[start+1 : p.i-1], nil
			}
			var s string
			if err := json.Unmarshal(p.d[start:p.i], &s); err != nil {
				return nil, errSyntax
			}
			return []byte(s), nil
		case c == '\\':
			plain = false
			p.i++ // the escaped byte; json.Unmarshal checks the escape
		case c < 0x20:
			return nil, errSyntax
		case c >= 0x80:
			plain = false
		}
	}
	return nil, errSyntax
}

func (p *jsonParser) stringInto(dst *string) error {
	if p.null() {
		return nil
	}
	s, err := p.string()
	if err == nil {
		*dst = s
	}
	return err
}

// number passes over a number by JSON's grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns it.
func (p *jsonParser) number() ([]byte, error) {
	start := p.i
	if p.i < len(p.d) && p.d[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.d) && p.d[p.i] == '0':
		p.i++
	case !p.digits():
		return nil, errSyntax
	}
	if p.i < len(p.d) && p.d[p.i] == '.' {
		p.i++
		if !p.digits() {
			return nil, errSyntax
		}
	}
	if p.i < len(p.d) && (p.d[p.i] == 'e' || p.d[p.i] == 'E') {
		p.i++
		if p.i < len(p.d) && (p.d[p.i] == '+' || p.d[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return nil, errSyntax
		}
	}
	return p.d[start:p.i], nil
}

func (p *jsonParser) digits() bool {
	start := p.i
	for p.i < len(p.d) && p.d[p.i] >= '0' && p.d[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

func (p *jsonParser) floatInto(dst *float64) error {
	if p.null() {
		return nil
	}
	b, err := p.number()
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return errSyntax
	}
	*dst = f
	return nil
}

// integer parses an integer of bits bits; a number with a fraction or an
// exponent is an error, as it is to json.Unmarshal.
func (p *jsonParser) integer(bits int) (int64, error) {
	b, err := p.number()
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(b), 10, bits)
	if err != nil {
		return 0, errSyntax
	}
	return n, nil
}

func (p *jsonParser) int64Into(dst *int64) error {
	if p.null() {
		return nil
	}
	n, err := p.integer(64)
	if err == nil {
		*dst = n
	}
	return err
}

func (p *jsonParser) intInto(dst *int) error {
	if p.null() {
		return nil
	}
	n, err := p.integer(strconv.IntSize)
	if err == nil {
		*dst = int(n)
	}
	return err
}

// skip parses and discards one value of any kind, inside depth arrays
// and objects (json.Unmarshal's count, which refuses more than maxDepth).
func (p *jsonParser) skip(depth int) error {
	if p.i >= len(p.d) {
		return errSyntax
	}
	switch c := p.d[p.i]; {
	case c == '"':
		_, err := p.stringBytes()
		return err
	case c == '{' || c == '[':
		if depth++; depth > maxDepth {
			return errSyntax
		}
		if c == '{' {
			return p.object(func([]byte) error { return p.skip(depth) })
		}
		p.i++
		p.space()
		if p.i < len(p.d) && p.d[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			p.space()
			if err := p.skip(depth); err != nil {
				return err
			}
			p.space()
			if p.i >= len(p.d) {
				return errSyntax
			}
			if p.d[p.i] == ']' {
				p.i++
				return nil
			}
			if p.d[p.i] != ',' {
				return errSyntax
			}
			p.i++
		}
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := p.number()
		return err
	}
	for _, lit := range []string{"true", "false", "null"} {
		if len(p.d)-p.i >= len(lit) && string(p.d[p.i:p.i+len(lit)]) == lit {
			p.i += len(lit)
			return nil
		}
	}
	return errSyntax
}
