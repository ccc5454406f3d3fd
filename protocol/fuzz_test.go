package protocol

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzDecode: no input panics, and every answer Decode implies is valid
// JSON a client can parse.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"x":1}}}`,
		`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":"b","method":"b","params":[]}]`,
		`[]`, `[1,2]`, `{`, `null`, `"s"`, `{"jsonrpc":"2.0","id":{},"method":"m"}`,
		`{"jsonrpc":"2.0","id":1e999,"method":"m"}`, "\xff\xfe", `[[[[[]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, ferr := Decode(b)
		if ferr != nil {
			if out := AppendError(nil, nil, ferr); !json.Valid(out) {
				t.Fatalf("frame error answer %s is not JSON", out)
			}
			return
		}
		if len(fr.Requests) == 0 {
			t.Fatal("no requests and no error")
		}
		for _, r := range fr.Requests {
			if r.Err != nil {
				if out := AppendError(nil, r.ID, r.Err); !json.Valid(out) {
					t.Fatalf("answer %s is not JSON (id %q)", out, r.ID)
				}
				continue
			}
			if r.Method == "" {
				t.Fatal("valid request without a method")
			}
			if out := AppendResult(nil, r.ID, r.Params); r.Params != nil && !json.Valid(out) {
				t.Fatalf("result echo %s is not JSON", out)
			}
			if p, perr := DecodeTopicParams(r.Params, true); perr == nil {
				if CheckTopic(p.Topic) != "" {
					t.Fatalf("accepted bad topic %q", p.Topic)
				}
				if out := AppendMessage(nil, p.Topic, p.Data); !json.Valid(out) {
					t.Fatalf("message %s is not JSON", out)
				}
			}
		}
	})
}

// refMembers reads the members of a JSON object with encoding/json's
// tokenizer, keys exact and in order: an independent reference for
// walkObject.
func refMembers(b []byte) (keys []string, vals [][]byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys = append(keys, t.(string))
		vals = append(vals, bytes.TrimSpace(v))
	}
	return keys, vals, true
}

// refPick returns the first value of each of names, whether one of them
// is repeated, and whether any other key is present.
func refPick(keys []string, vals [][]byte, names ...string) (got map[string][]byte, dup, other bool) {
	got = map[string][]byte{}
	for i, k := range keys {
		if !slices.Contains(names, k) {
			other = true
			continue
		}
		if _, seen := got[k]; seen {
			dup = true
		}
		if got[k] == nil {
			got[k] = vals[i]
		}
	}
	return got, dup, other
}

// FuzzExactDecode: the decoder reads exactly the members a tokenizer
// sees, key for key (case-sensitive, escapes resolved), answers a repeated
// member -32600, and calls a request Plain only when encoding/json's
// case-insensitive, last-wins decoding means the same method, id and
// params: the bytes of a plain request can be forwarded as they are.
func FuzzExactDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"x":[1,"]}"]}}}`,
		`{"method":"m","jsonrpc":"2.0"}`, `{"id":"a\"b","jsonrpc":"2.0","method":"m","params":null}`,
		`{"jsonrpc":"2.0","method":"m\u0041"}`, `{"jsonrpc":"2.0","jsonrpc":"1.0","method":"m"}`,
		`{"jsonrpc":"2.0","id":1,"method":"admin.wipe","Method":"harmless"}`,
		`{"jsonrpc":"2.0","id":1,"Method":"admin.wipe","method":"harmless"}`,
		`{"jsonrpc":"2.0","id":1,"\u006dethod":"a","method":"b"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","meth\u017fod":"b"}`,
		`{"topic":"t","data":null}`, `{"data":"x","topic":"a"}`, `{"Topic":"t"}`, `{"topic":"t","extra":1}`,
		`{"topic":"ok","Topic":"__x"}`, `{"topic":"a","topic":"b"}`, `{"topic":"\u0061"}`,
		`{ "topic" : "t" , "data" : [ 1 , 2 ] }`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return // the server closes a frame that is not UTF-8 before decoding (1007)
		}
		keys, vals, ok := refMembers(b)
		if !ok {
			return
		}
		fr, ferr := Decode(b)
		if ferr != nil || len(fr.Requests) != 1 {
			t.Fatalf("object answered %v %+v", ferr, fr)
		}
		r := fr.Requests[0]
		m, dup, other := refPick(keys, vals, "jsonrpc", "id", "method", "params")
		if dup {
			if r.Err == nil || r.Err.Code != CodeInvalidRequest {
				t.Fatalf("repeated member not refused: %+v", r)
			}
		} else {
			w := wireRequest{JSONRPC: m["jsonrpc"], ID: m["id"], Method: m["method"], Params: m["params"]}
			want := w.request()
			if string(r.ID) != string(want.ID) || r.Method != want.Method || string(r.Params) != string(want.Params) || (r.Err == nil) != (want.Err == nil) {
				t.Fatalf("decoded %+v, reference %+v", r, want)
			}
			if r.Plain != (r.Err == nil && !other) {
				t.Fatalf("Plain = %v with other members %v", r.Plain, other)
			}
		}
		if r.Plain {
			var loose struct {
				ID     json.RawMessage
				Method string
				Params json.RawMessage
			}
			if err := json.Unmarshal(b, &loose); err != nil || loose.Method != r.Method ||
				string(loose.ID) != string(r.ID) || string(loose.Params) != string(r.Params) {
				t.Fatalf("plain request %+v means %+v to encoding/json (%v)", r, loose, err)
			}
		}

		p, perr := DecodeTopicParams(b, false)
		pm, pdup, _ := refPick(keys, vals, "topic", "data")
		switch {
		case pdup:
			if perr == nil || perr.Code != CodeInvalidRequest {
				t.Fatalf("repeated params member not refused: %+v %v", p, perr)
			}
		case perr == nil:
			var topic string
			if err := json.Unmarshal(pm["topic"], &topic); err != nil || topic != p.Topic || string(pm["data"]) != string(p.Data) {
				t.Fatalf("params %q %s, reference %s %s", p.Topic, p.Data, pm["topic"], pm["data"])
			}
		}
	})
}
