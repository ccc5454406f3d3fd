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
