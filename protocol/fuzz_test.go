package protocol

import (
	"encoding/json"
	"testing"
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

// FuzzFastPath: wherever the fast path answers, it answers exactly what
// encoding/json would.
func FuzzFastPath(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"x":[1,"]}"]}}}`,
		`{"method":"m","jsonrpc":"2.0"}`, `{"id":"a\"b","jsonrpc":"2.0","method":"m","params":null}`,
		`{"jsonrpc":"2.0","method":"m\u0041"}`, `{"jsonrpc":"2.0","jsonrpc":"1.0","method":"m"}`,
		`{"topic":"t","data":null}`, `{"data":"x","topic":"a"}`, `{"Topic":"t"}`, `{"topic":"t","extra":1}`,
		`{ "topic" : "t" , "data" : [ 1 , 2 ] }`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		if fr, ok := fastRequest(b); ok {
			var w wireRequest
			if err := json.Unmarshal(b, &w); err != nil {
				t.Fatalf("fast path accepted what encoding/json refuses: %v", err)
			}
			sr := w.request()
			if string(fr.ID) != string(sr.ID) || fr.Method != sr.Method || string(fr.Params) != string(sr.Params) || (fr.Err == nil) != (sr.Err == nil) {
				t.Fatalf("fast %+v, slow %+v", fr, sr)
			}
		}
		if fp, ok := fastTopicParams(b); ok {
			var sp TopicParams
			if err := json.Unmarshal(b, &sp); err != nil {
				t.Fatalf("fast params accepted what encoding/json refuses: %v", err)
			}
			if fp.Topic != sp.Topic || string(fp.Data) != string(sp.Data) {
				t.Fatalf("fast %q %s, slow %q %s", fp.Topic, fp.Data, sp.Topic, sp.Data)
			}
		}
	})
}
