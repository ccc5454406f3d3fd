package protocol

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rtserver/rtserver/internal/jsonexact"
)

func TestDecodePresenceParams(t *testing.T) {
	p, perr := DecodePresenceParams(json.RawMessage(`{"topic":"room:\u0061","cursor":"c","Topic":"x","TOPIC":"y","other":1}`))
	if perr != nil || p.Topic != "room:a" || p.Cursor != "c" {
		t.Fatalf("got %+v %v", p, perr)
	}
	for give, code := range map[string]int{
		`{"topic":"a","topic":"b"}`:              CodeInvalidRequest,
		`{"topic":"a","cursor":"","cursor":"x"}`: CodeInvalidRequest,
		`{"topic":"a","\u0074opic":"b"}`:         CodeInvalidRequest,
		`{"Topic":"a"}`:                          CodeInvalidParams,
		`{"TOPIC":"a"}`:                          CodeInvalidParams,
		`{"topic":1}`:                            CodeInvalidParams,
		`{"topic":"a","cursor":null}`:            CodeInvalidParams,
		`{"topic":"__x"}`:                        CodeInvalidParams,
		`["a"]`:                                  CodeInvalidParams,
		`{"topic":"a","cursor":"` + strings.Repeat("c", MaxCursor+1) + `"}`: CodeInvalidParams,
	} {
		if _, perr := DecodePresenceParams(json.RawMessage(give)); perr == nil || perr.Code != code {
			t.Errorf("%.60s: got %v, want %d", give, perr, code)
		}
	}
}

func TestDecodeRefreshParams(t *testing.T) {
	tok, perr := DecodeRefreshParams(json.RawMessage(`{"token":"a.b.c","Token":"x"}`))
	if perr != nil || tok != "a.b.c" {
		t.Fatalf("got %q %v", tok, perr)
	}
	for give, code := range map[string]int{
		`{"token":"a","token":"b"}`: CodeInvalidRequest,
		`{"Token":"a"}`:             CodeInvalidParams,
		`{"token":""}`:              CodeInvalidParams,
		`{"token":1}`:               CodeInvalidParams,
		`{}`:                        CodeInvalidParams,
		``:                          CodeInvalidParams,
	} {
		if _, perr := DecodeRefreshParams(json.RawMessage(give)); perr == nil || perr.Code != code {
			t.Errorf("%s: got %v, want %d", give, perr, code)
		}
	}
}

// exactlyOnce returns the value of the member named name when it appears
// exactly once (by exact name), by a reading of its own.
func exactlyOnce(t *testing.T, data []byte, name string) (string, int) {
	n, val := 0, ""
	jsonexact.WalkObject(data, func(key, v []byte) bool {
		if string(key) == name {
			n++
			if json.Unmarshal(v, &val) != nil {
				val = "\x00not a string"
			}
		}
		return true
	})
	return val, n
}

// The decoders read exactly what an independent exact reading reads: a
// member present once is taken as it is, a repeated one is -32600, and a
// case variant is never taken for it.
func FuzzDecodePresenceParams(f *testing.F) {
	f.Add(`{"topic":"room:a","cursor":"c"}`)
	f.Add(`{"topic":"a","Topic":"b","TOPIC":"c"}`)
	f.Add(`{"topic":"a","topic":"b"}`)
	f.Add(`{"\u0074opic":"a","cursor":"\u00e9"}`)
	f.Fuzz(func(t *testing.T, s string) {
		p, perr := DecodePresenceParams(json.RawMessage(s))
		if !json.Valid([]byte(s)) || len(s) == 0 || s[0] != '{' {
			if perr == nil {
				t.Fatalf("accepted %q", s)
			}
			return
		}
		topic, nt := exactlyOnce(t, []byte(s), "topic")
		cursor, nc := exactlyOnce(t, []byte(s), "cursor")
		if (nt > 1 || nc > 1) != (perr != nil && perr.Code == CodeInvalidRequest) {
			t.Fatalf("%q: topic %d times, cursor %d times, answered %v", s, nt, nc, perr)
		}
		if perr != nil {
			return
		}
		if p.Topic != topic || nt != 1 || (nc == 1 && p.Cursor != cursor) || (nc == 0 && p.Cursor != "") ||
			CheckTopic(p.Topic) != "" || len(p.Cursor) > MaxCursor {
			t.Fatalf("%q: read %+v", s, p)
		}
	})
}

func FuzzDecodeRefreshParams(f *testing.F) {
	f.Add(`{"token":"a.b.c"}`)
	f.Add(`{"token":"a","Token":"b"}`)
	f.Add(`{"token":"a","token":"b"}`)
	f.Fuzz(func(t *testing.T, s string) {
		tok, perr := DecodeRefreshParams(json.RawMessage(s))
		if !json.Valid([]byte(s)) || len(s) == 0 || s[0] != '{' {
			if perr == nil {
				t.Fatalf("accepted %q", s)
			}
			return
		}
		want, n := exactlyOnce(t, []byte(s), "token")
		if (n > 1) != (perr != nil && perr.Code == CodeInvalidRequest) {
			t.Fatalf("%q: token %d times, answered %v", s, n, perr)
		}
		if perr == nil && (n != 1 || tok != want || tok == "") {
			t.Fatalf("%q: read %q", s, tok)
		}
	})
}
