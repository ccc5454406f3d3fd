package rpcproxy

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
)

// compact is v without insignificant whitespace ("" for nil).
func compact(v []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// FuzzForwardedIsAdmitted: for every request a frame decodes to, the
// body sent to the backend means the same method, id and params as what
// the server decoded (and so admitted), both to encoding/json (matching
// keys case-insensitively, keeping the last: a common backend) and to the
// server's own exact decoder. The server sets Request.Raw the way this
// test does (server/conn.go, runFrame): for a single plain request only.
func FuzzForwardedIsAdmitted(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"admin.wipe","Method":"harmless"}`,
		`{"jsonrpc":"2.0","id":1,"method":"harmless","Method":"admin.wipe"}`,
		`{"jsonrpc":"2.0","id":1,"method":"harmless","METHOD":"admin.wipe","params":{"a":1},"Params":{"a":2}}`,
		`{"jsonrpc":"2.0","id":1,"method":"harmless","meth\u017fod":"admin.wipe"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":[1, 2 ,3]}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a","Method":"b"},{"jsonrpc":"2.0","method":"c"}]`,
		`{"jsonrpc":"2.0","id":"x","method":"a\u0041","params":{"topic":"ok","Topic":"__x"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return // closed with 1007 before decoding
		}
		fr, ferr := protocol.Decode(b)
		if ferr != nil {
			return
		}
		for _, r := range fr.Requests {
			if r.Err != nil {
				continue
			}
			req := &server.Request{Method: r.Method, Params: r.Params, ID: r.ID}
			if !fr.Batch && r.Plain {
				req.Raw = b
			}
			body, err := requestBody(req)
			if err != nil {
				t.Fatal(err)
			}
			var loose struct {
				ID     json.RawMessage
				Method string
				Params json.RawMessage
			}
			if err := json.Unmarshal(body, &loose); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if loose.Method != r.Method || compact(loose.ID) != compact(r.ID) || compact(loose.Params) != compact(r.Params) {
				t.Fatalf("admitted %q id %s params %s; encoding/json reads the body %s as %q id %s params %s",
					r.Method, r.ID, r.Params, body, loose.Method, loose.ID, loose.Params)
			}
			again, aerr := protocol.Decode(body)
			if aerr != nil || len(again.Requests) != 1 || again.Requests[0].Err != nil {
				t.Fatalf("body %s does not decode: %v %+v", body, aerr, again)
			}
			a := again.Requests[0]
			if a.Method != r.Method || compact(a.ID) != compact(r.ID) || compact(a.Params) != compact(r.Params) {
				t.Fatalf("admitted %q, the body %s decodes to %q", r.Method, body, a.Method)
			}
		}
	})
}
