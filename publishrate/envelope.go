package publishrate

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"

	"github.com/rtserver/rtserver/internal/envsign"
	"github.com/rtserver/rtserver/protocol"
)

// envelopeVersion is the "v" of an instance's slice in docs/cluster.md,
// viewVersion that of the merged view a merging instance publishes.
const (
	envelopeVersion = 1
	viewVersion     = 2
)

// Bounds on numbers read off the wire. Far above any real rate, low enough
// that summing MaxInstances of them stays finite and exact enough.
const (
	maxRate  = 1e15
	maxCount = 1 << 40
	// maxViewInstances bounds a merged view's instance count.
	maxViewInstances = 1 << 24
)

// sigPrefix starts the signature member, which is always the envelope's
// last member: `,"sig":"` + 64 hex digits + `"}`.
const (
	sigPrefix  = `,"sig":"`
	sigHexLen  = 2 * envsign.Size
	sigTailLen = len(sigPrefix) + sigHexLen + len(`"}`)
)

type wireTopic struct {
	Topic          string  `json:"topic"`
	MessagesPerSec float64 `json:"messagesPerSec"`
	BytesPerSec    float64 `json:"bytesPerSec"`
	// Instances is, in a merged view, how many instances' slices carry
	// the topic; a slice leaves it out (one instance: its sender).
	Instances int `json:"instances,omitzero"`
}

// instances is how many instances the entry speaks for.
func (t wireTopic) instances() int { return max(t.Instances, 1) }

type wireUser struct {
	User           string  `json:"user"`
	MessagesPerSec float64 `json:"messagesPerSec"`
}

type wireSub struct {
	Topic string `json:"topic"`
	Count int    `json:"count"`
}

// envelope is the signed body, in the member order it is sent. Sig is not
// a field: it is appended after the body (see sign).
type envelope struct {
	V          int         `json:"v"`
	InstanceID string      `json:"instanceId"`
	TS         int64       `json:"ts"`
	Epoch      int64       `json:"epoch,omitzero"`     // merged view: the merging instance's fencing number
	Instances  int         `json:"instances,omitzero"` // merged view: the instances whose slices it sums
	Slice      []wireTopic `json:"slice"`
	Users      []wireUser  `json:"users"`
	Subs       []wireSub   `json:"subs,omitzero"` // nil: omitted (no Subjects); empty: []
}

// Errors of decodeEnvelope. Every one means: drop and count a parse error.
var (
	errOversize  = errors.New("envelope over MaxEnvelopeBytes")
	errUnsigned  = errors.New("envelope unsigned")
	errForged    = errors.New("envelope signature does not match")
	errMalformed = errors.New("envelope malformed")
)

// marshalEnvelope encodes e, signed when secret is set.
func marshalEnvelope(e *envelope, secret []byte) ([]byte, error) {
	return marshalSigned(e, envsign.New(secret))
}

// marshalSigned encodes e, signed under its kind's domain when signer is
// set.
func marshalSigned(e *envelope, signer *envsign.Signer) ([]byte, error) {
	body, err := json.Marshal(e)
	if err != nil || signer == nil {
		return body, err
	}
	return sign(signer, domainOf(e.V), body), nil
}

// domainOf is the signature domain of an envelope version: a slice never
// passes for a merged view, nor the reverse.
func domainOf(version int) envsign.Domain {
	if version == viewVersion {
		return envsign.RateView
	}
	return envsign.RateSlice
}

// sign turns body (a JSON object, `{...}`) into
// `{...,"sig":"<hex MAC>"}`, the MAC being the fleet signer's HMAC-SHA256
// under the rate-slice domain label (internal/envsign) of exactly the
// bytes of body, which are the sent bytes with the sig member cut out.
func sign(signer *envsign.Signer, d envsign.Domain, body []byte) []byte {
	mac := signer.AppendMAC(make([]byte, 0, envsign.Size), d, body)
	out := make([]byte, 0, len(body)+sigTailLen)
	out = append(out, body[:len(body)-1]...)
	out = append(out, sigPrefix...)
	out = hex.AppendEncode(out, mac)
	return append(out, '"', '}')
}

// verify checks that wire ends with the sig member over the rest, and
// returns the signed body (wire without the sig member).
func verify(signer *envsign.Signer, d envsign.Domain, wire []byte) ([]byte, error) {
	if len(wire) < sigTailLen+2 {
		return nil, errUnsigned
	}
	cut := len(wire) - sigTailLen
	tail := wire[cut:]
	if string(tail[:len(sigPrefix)]) != sigPrefix || string(tail[len(tail)-2:]) != `"}` {
		return nil, errUnsigned
	}
	var got [envsign.Size]byte
	if _, err := hex.Decode(got[:], tail[len(sigPrefix):len(sigPrefix)+sigHexLen]); err != nil {
		return nil, errForged
	}
	body := make([]byte, cut+1)
	copy(body, wire[:cut])
	body[cut] = '}'
	if !envsign.Equal(signer.MAC(d, string(body)), string(got[:])) {
		return nil, errForged
	}
	return body, nil
}

// decodeEnvelope checks size and signature, parses and validates. maxList
// bounds each of slice, users and subs. The strings of the envelope
// returned are views of the payload (or of the signed body verify copied
// out of it), which no one changes: see parseEnvelopeShared.
// A nil signer takes envelopes as they are, signed or not.
func decodeEnvelope(payload string, signer *envsign.Signer, maxBytes, maxList int) (*envelope, error) {
	return decodeVersion(payload, envelopeVersion, signer, maxBytes, maxList)
}

// decodeView is decodeEnvelope for a merged view.
func decodeView(payload string, signer *envsign.Signer, maxBytes, maxList int) (*envelope, error) {
	return decodeVersion(payload, viewVersion, signer, maxBytes, maxList)
}

func decodeVersion(payload string, version int, signer *envsign.Signer, maxBytes, maxList int) (*envelope, error) {
	if len(payload) > maxBytes {
		return nil, errOversize
	}
	// Read only, as the string it is.
	body := unsafe.Slice(unsafe.StringData(payload), len(payload))
	if signer != nil {
		var err error
		if body, err = verify(signer, domainOf(version), body); err != nil {
			return nil, err
		}
	}
	var e envelope
	if err := parseEnvelopeShared(body, &e, true); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if err := e.validate(version, maxList); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return &e, nil
}

func (e *envelope) validate(version, maxList int) error {
	switch {
	case e.V != version:
		return fmt.Errorf("version %d", e.V)
	case version == viewVersion && (e.Epoch < 1 || e.Instances < 1 || e.Instances > maxViewInstances):
		return errors.New("bad epoch or instances")
	case !validInstanceID(e.InstanceID):
		return errors.New("bad instanceId")
	case len(e.Slice) > maxList || len(e.Users) > maxList || len(e.Subs) > maxList:
		return errors.New("list too long")
	}
	seen := make(map[string]struct{}, max(len(e.Slice), len(e.Users), len(e.Subs)))
	for i, t := range e.Slice {
		if !protocol.ValidTopic(t.Topic) || !validRate(t.MessagesPerSec) || !validRate(t.BytesPerSec) {
			return fmt.Errorf("bad slice entry %q", t.Topic)
		}
		switch {
		case version == envelopeVersion:
			e.Slice[i].Instances = 0 // a slice speaks for its sender alone
		case t.Instances < 1 || t.Instances > e.Instances:
			return fmt.Errorf("bad instances of %q", t.Topic)
		}
		if _, dup := seen[t.Topic]; dup {
			return fmt.Errorf("duplicate topic %q", t.Topic)
		}
		seen[t.Topic] = struct{}{}
	}
	clear(seen)
	for _, u := range e.Users {
		if !validUser(u.User) || !validRate(u.MessagesPerSec) {
			return errors.New("bad users entry")
		}
		if _, dup := seen[u.User]; dup {
			return errors.New("duplicate user")
		}
		seen[u.User] = struct{}{}
	}
	clear(seen)
	for _, s := range e.Subs {
		if !protocol.ValidTopic(s.Topic) || s.Count < 0 || s.Count > maxCount {
			return fmt.Errorf("bad subs entry %q", s.Topic)
		}
		if _, dup := seen[s.Topic]; dup {
			return fmt.Errorf("duplicate subs topic %q", s.Topic)
		}
		seen[s.Topic] = struct{}{}
	}
	return nil
}

func validRate(f float64) bool { return f >= 0 && f <= maxRate && !math.IsNaN(f) }

func validUser(u string) bool { return u != "" && len(u) <= MaxUserLen && utf8.ValidString(u) }

// validInstanceID: 1 to MaxInstanceIDLen bytes of the topic alphabet, so ids
// are safe in logs and labels.
func validInstanceID(id string) bool { return len(id) <= MaxInstanceIDLen && protocol.ValidTopic(id) }
