package publishrate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// knownMembers are the member names parseEnvelope decodes.
var knownMembers = []string{"v", "instanceId", "ts", "slice", "users", "subs", "topic", "messagesPerSec", "bytesPerSec", "user", "count", "epoch", "instances"}

// FuzzParseEnvelope holds parseEnvelope to json.Unmarshal: the same bytes
// give the same envelope, or both an error. The one difference allowed is
// the documented one: a member whose name matches a known one only
// case-insensitively is json.Unmarshal's field and parseEnvelope's unknown
// member.
func FuzzParseEnvelope(f *testing.F) {
	for _, e := range []*envelope{
		siblingEnvelope(3, 7, DefaultTopN, true),
		{V: 1, InstanceID: "A", TS: testTS, Slice: []wireTopic{}, Users: nil},
	} {
		b, _ := json.Marshal(e)
		f.Add(b)
	}
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"v":1,"v":null}`, `{"slice":null,"users":[],"subs":[null]}`,
		`{"v":1.0}`, `{"v":1e2}`, `{"ts":-0}`, `{"slice":[{"topic":"a","messagesPerSec":1e400}]}`,
		`{"instanceId":"\u0041\ud83d\ude00"}`, `{"users":[{"user":"\xff\xfe"}]}`, `{"x":[[[{"y":"\n"}]]]}`,
		`{"Slice":[{"topic":"a"}]}`, `{"sl\u0069ce":[{"topic":"a"}]}`, ` {"v" : 1 } `, `{"v":1}x`,
		`{"v":01}`, `{"v":-}`, `{"x":tru}`, `{"x":"\q"}`, `{"a":1,}`, `{"x":[1,]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got envelope
		errWant := json.Unmarshal(b, &want)
		errGot := parseEnvelope(b, &got)
		// The receive path's strings are views of the input: the same
		// envelope, or the same refusal.
		var shared envelope
		if errShared := parseEnvelopeShared(bytes.Clone(b), &shared, true); (errShared == nil) != (errGot == nil) || !reflect.DeepEqual(shared, got) {
			t.Fatalf("%q: shared parse %+v (%v), copying parse %+v (%v)", b, shared, errShared, got, errGot)
		}
		switch {
		case errWant == nil && errGot == nil:
			if !reflect.DeepEqual(got, want) && !foldedMemberName(b) {
				t.Fatalf("%q:\nparseEnvelope  %+v\njson.Unmarshal %+v", b, got, want)
			}
		case errWant != nil && errGot == nil:
			t.Fatalf("%q: parseEnvelope accepted what json.Unmarshal refuses (%v): %+v", b, errWant, got)
		case errWant == nil && errGot != nil && !foldedMemberName(b):
			t.Fatalf("%q: parseEnvelope refused (%v) what json.Unmarshal takes: %+v", b, errGot, want)
		}
	})
}

// foldedMemberName reports whether b, valid JSON, has an object member
// whose name is a known one in another case (see FuzzParseEnvelope).
func foldedMemberName(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		s, ok := tok.(string)
		if !ok {
			continue
		}
		for _, k := range knownMembers {
			if s != k && strings.EqualFold(s, k) {
				return true
			}
		}
	}
}

func TestParseEnvelopeMatchesJSON(t *testing.T) {
	e := siblingEnvelope(3, 7, DefaultTopN, true)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var got envelope
	if err := parseEnvelope(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, e) {
		t.Errorf("parseEnvelope = %+v, want %+v", got, *e)
	}
}
