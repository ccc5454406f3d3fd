package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantFrame int // whole-frame error code, 0 for none
		batch     bool
		want      []Request // ID/Method/Params and Err code (compared below)
		errCodes  []int
	}{
		{name: "request", give: `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}`,
			want: []Request{{ID: raw("1"), Method: "m", Params: raw(`{"a":1}`)}}, errCodes: []int{0}},
		{name: "string id", give: `{"jsonrpc":"2.0","id":"x","method":"m"}`,
			want: []Request{{ID: raw(`"x"`), Method: "m"}}, errCodes: []int{0}},
		{name: "null id is a request", give: `{"jsonrpc":"2.0","id":null,"method":"m"}`,
			want: []Request{{ID: raw("null"), Method: "m"}}, errCodes: []int{0}},
		{name: "notification", give: `{"jsonrpc":"2.0","method":"m","params":[1]}`,
			want: []Request{{Method: "m", Params: raw("[1]")}}, errCodes: []int{0}},
		{name: "leading whitespace", give: " \n\t{\"jsonrpc\":\"2.0\",\"method\":\"m\"}",
			want: []Request{{Method: "m"}}, errCodes: []int{0}},
		{name: "not json", give: `{"jsonrpc"`, wantFrame: CodeParseError},
		{name: "empty", give: ``, wantFrame: CodeParseError},
		{name: "trailing garbage", give: `{"jsonrpc":"2.0","method":"m"} x`, wantFrame: CodeParseError},
		{name: "empty batch", give: `[]`, wantFrame: CodeInvalidRequest},
		{name: "broken batch", give: `[{"jsonrpc":"2.0","method":"m"},`, wantFrame: CodeParseError},
		{name: "scalar", give: `"hello"`, want: []Request{{ID: raw("null")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "wrong version keeps id", give: `{"jsonrpc":"1.0","id":5,"method":"m"}`,
			want: []Request{{ID: raw("5")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "missing version", give: `{"id":5,"method":"m"}`, want: []Request{{ID: raw("5")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "object id", give: `{"jsonrpc":"2.0","id":{},"method":"m"}`, want: []Request{{ID: raw("null")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "bool id", give: `{"jsonrpc":"2.0","id":true,"method":"m"}`, want: []Request{{ID: raw("null")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "method number", give: `{"jsonrpc":"2.0","id":1,"method":1}`, want: []Request{{ID: raw("1")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "empty method", give: `{"jsonrpc":"2.0","id":1,"method":""}`, want: []Request{{ID: raw("1")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "params scalar", give: `{"jsonrpc":"2.0","id":1,"method":"m","params":3}`, want: []Request{{ID: raw("1")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "keys are case-sensitive", give: `{"jsonrpc":"2.0","id":1,"method":"admin.wipe","Method":"harmless"}`,
			want: []Request{{ID: raw("1"), Method: "admin.wipe"}}, errCodes: []int{0}},
		{name: "escaped key is the key", give: `{"jsonrpc":"2.0","id":1,"\u006dethod":"m"}`,
			want: []Request{{ID: raw("1"), Method: "m"}}, errCodes: []int{0}},
		{name: "repeated method", give: `{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`,
			want: []Request{{ID: raw("1")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "repeated method, escaped", give: `{"jsonrpc":"2.0","id":1,"method":"a","\u006dethod":"b"}`,
			want: []Request{{ID: raw("1")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "repeated id answers null", give: `{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}`,
			want: []Request{{ID: raw("null")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "repeated params", give: `{"jsonrpc":"2.0","id":1,"method":"a","params":[],"params":{}}`,
			want: []Request{{ID: raw("1")}}, errCodes: []int{CodeInvalidRequest}},
		{name: "batch mixed", give: `[{"jsonrpc":"2.0","id":1,"method":"a"},1,{"jsonrpc":"2.0","method":"b"}]`, batch: true,
			want:     []Request{{ID: raw("1"), Method: "a"}, {ID: raw("null")}, {Method: "b"}},
			errCodes: []int{0, CodeInvalidRequest, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ferr := Decode([]byte(tt.give))
			if tt.wantFrame != 0 {
				if ferr == nil || ferr.Code != tt.wantFrame {
					t.Fatalf("frame error %v, want code %d", ferr, tt.wantFrame)
				}
				return
			}
			if ferr != nil {
				t.Fatalf("frame error %v", ferr)
			}
			if f.Batch != tt.batch || len(f.Requests) != len(tt.want) {
				t.Fatalf("batch %v with %d requests, want %v with %d", f.Batch, len(f.Requests), tt.batch, len(tt.want))
			}
			for i, w := range tt.want {
				g := f.Requests[i]
				code := 0
				if g.Err != nil {
					code = g.Err.Code
				}
				if code != tt.errCodes[i] || string(g.ID) != string(w.ID) || (code == 0 && (g.Method != w.Method || string(g.Params) != string(w.Params))) {
					t.Errorf("request %d = {ID:%s Method:%q Params:%s Err:%d}, want {ID:%s Method:%q Params:%s Err:%d}",
						i, g.ID, g.Method, g.Params, code, w.ID, w.Method, w.Params, tt.errCodes[i])
				}
			}
		})
	}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestDecodeBatchBound(t *testing.T) {
	elem := `{"jsonrpc":"2.0","method":"m"}`
	full := "[" + strings.Repeat(elem+",", MaxBatch-1) + elem + "]"
	if f, ferr := Decode([]byte(full)); ferr != nil || len(f.Requests) != MaxBatch {
		t.Fatalf("a batch of MaxBatch: %v, %d requests", ferr, len(f.Requests))
	}
	// One more, or 32,000 more: refused as a whole with one error, so the
	// answer stays one small object however many elements were sent.
	for _, n := range []int{MaxBatch + 1, 32000} {
		frame := "[" + strings.Repeat(elem+",", n-1) + elem + "]"
		f, ferr := Decode([]byte(frame))
		if ferr == nil || ferr.Code != CodeInvalidRequest || f.Requests != nil {
			t.Fatalf("a batch of %d: %v, %d requests", n, ferr, len(f.Requests))
		}
	}
}

func TestDecodeDepthBound(t *testing.T) {
	nested := func(n int) string {
		return `{"jsonrpc":"2.0","id":1,"method":"m","params":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}"
	}
	// The request object is one level; its params add the rest.
	if _, ferr := Decode([]byte(nested(DefaultMaxDepth))); ferr != nil {
		t.Fatalf("depth %d refused: %v", DefaultMaxDepth, ferr)
	}
	if _, ferr := Decode([]byte(nested(DefaultMaxDepth + 1))); ferr == nil || ferr.Code != CodeInvalidRequest {
		t.Fatalf("depth %d: %v, want -32600", DefaultMaxDepth+1, ferr)
	}
	if _, ferr := DecodeDepth([]byte(nested(5)), 4); ferr == nil {
		t.Fatal("depth 5 under a limit of 4 accepted")
	}
	// Brackets inside strings are not nesting.
	str := `{"jsonrpc":"2.0","method":"m","params":["` + strings.Repeat("[{", 100) + `"]}`
	if _, ferr := Decode([]byte(str)); ferr != nil {
		t.Fatalf("brackets in a string counted: %v", ferr)
	}
}

func TestTopicGrammar(t *testing.T) {
	tests := []struct {
		give  string
		valid bool
		ok    bool // a client may use it
	}{
		{"a", true, true},
		{"chat:room-1/sub_topic.x@y", true, true},
		{strings.Repeat("a", 256), true, true},
		{strings.Repeat("a", 257), false, false},
		{"", false, false},
		{"has space", false, false},
		{"ünï", false, false},
		{"a\x00b", false, false},
		{"__system", true, false},
		{"_single", true, true},
	}
	for _, tt := range tests {
		if got := ValidTopic(tt.give); got != tt.valid {
			t.Errorf("ValidTopic(%q) = %v, want %v", tt.give, got, tt.valid)
		}
		if got := CheckTopic(tt.give) == ""; got != tt.ok {
			t.Errorf("CheckTopic(%q) ok = %v, want %v", tt.give, got, tt.ok)
		}
	}
}

func TestDecodeTopicParams(t *testing.T) {
	tests := []struct {
		give     string
		withData bool
		wantErr  bool
		topic    string
		data     string
	}{
		{`{"topic":"t"}`, false, false, "t", ""},
		{`{"topic":"t","data":{"x":[1,2]}}`, true, false, "t", `{"x":[1,2]}`},
		{`{"topic":"t","data":null}`, true, false, "t", "null"},
		{`{"topic":"t"}`, true, true, "", ""},
		{`{"topic":5}`, false, true, "", ""},
		{`[1]`, false, true, "", ""},
		{``, false, true, "", ""},
		{`{"topic":"__x"}`, false, true, "", ""},
		{`{"topic":"ok","Topic":"__x"}`, false, false, "ok", ""},
		{`{"Topic":"t"}`, false, true, "", ""},
		{`{"t\u006fpic":"t","extra":{"topic":1}}`, false, false, "t", ""},
	}
	for _, tt := range tests {
		p, err := DecodeTopicParams(raw(tt.give), tt.withData)
		if (err != nil) != tt.wantErr {
			t.Errorf("DecodeTopicParams(%s) err = %v, wantErr %v", tt.give, err, tt.wantErr)
			continue
		}
		if err != nil {
			if err.Code != CodeInvalidParams {
				t.Errorf("DecodeTopicParams(%s) code %d", tt.give, err.Code)
			}
			continue
		}
		if p.Topic != tt.topic || string(p.Data) != tt.data {
			t.Errorf("DecodeTopicParams(%s) = %q %s", tt.give, p.Topic, p.Data)
		}
	}
}

// A repeated topic or data is -32600, like a repeated request member.
func TestDecodeTopicParamsRepeatedMember(t *testing.T) {
	for _, give := range []string{`{"topic":"a","topic":"b"}`, `{"topic":"a","data":1,"data":2}`, `{"topic":"a","to\u0070ic":"b"}`} {
		if _, err := DecodeTopicParams(raw(give), false); err == nil || err.Code != CodeInvalidRequest {
			t.Errorf("DecodeTopicParams(%s) = %v, want -32600", give, err)
		}
	}
}

// Only a request with exactly the four members, once each, is Plain.
func TestDecodePlain(t *testing.T) {
	for give, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"Method":"x"}}`: true,
		`{"jsonrpc":"2.0","\u0069d":1,"method":"m"}`:                    true,
		`{"jsonrpc":"2.0","id":1,"method":"m","Method":"x"}`:            false,
		`{"jsonrpc":"2.0","id":1,"method":"m","extra":0}`:               false,
		`{"jsonrpc":"1.0","id":1,"method":"m"}`:                         false,
	} {
		f, _ := Decode([]byte(give))
		if got := f.Requests[0].Plain; got != want {
			t.Errorf("%s: Plain = %v, want %v", give, got, want)
		}
	}
}

// Everything the encoder writes is valid JSON that decodes back to what
// went in, whatever the topic or message text.
func TestEncodeIsValidJSON(t *testing.T) {
	for _, s := range []string{"plain", `quo"te`, "back\\slash", "nl\n", "ünï", "\x01", "<&>"} {
		checks := map[string][]byte{
			"message": AppendMessage(nil, s, raw(`{"a":1}`)),
			"error":   AppendError(nil, raw("1"), NewError(CodeInvalidParams, s, map[string]int{"limit": 3})),
			"result":  AppendResult(nil, raw(`"id"`), nil),
			"system":  AppendSystem(nil, s, 42),
		}
		for kind, b := range checks {
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s with %q: %s is not JSON: %v", kind, s, b, err)
			}
		}
		var m struct {
			Params struct{ Topic string } `json:"params"`
		}
		json.Unmarshal(AppendMessage(nil, s, raw("1")), &m)
		if m.Params.Topic != s {
			t.Errorf("topic %q came back as %q", s, m.Params.Topic)
		}
	}
	if got := string(AppendResult(nil, nil, nil)); got != `{"jsonrpc":"2.0","id":null,"result":{}}` {
		t.Errorf("AppendResult(nil, nil) = %s", got)
	}
	if got := string(AppendSystem(nil, EventDraining, 1500)); got != `{"jsonrpc":"2.0","method":"system","params":{"event":"draining","reconnectAfterMs":1500}}` {
		t.Errorf("AppendSystem = %s", got)
	}
}

func TestAsErrorHidesText(t *testing.T) {
	if e := AsError(NewError(CodeForbidden, "", nil)); e.Code != CodeForbidden || e.Message != "FORBIDDEN" {
		t.Fatalf("AsError(*Error) = %+v", e)
	}
	if e := AsError(fmt.Errorf("handler: %w", NewError(CodeForbidden, "", nil))); e.Code != CodeForbidden {
		t.Fatalf("AsError(wrapped *Error) = %+v", e)
	}
	if e := AsError(errString("db password is hunter2")); e.Code != CodeInternal || strings.Contains(e.Message, "hunter2") {
		t.Fatalf("AsError(other) = %+v", e)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestMessageOverhead(t *testing.T) {
	if got := len(AppendMessage(nil, "t", raw("1"))); got != MessageOverhead+2 {
		t.Fatalf("message of 2 bytes of topic and data is %d bytes, MessageOverhead says %d", got, MessageOverhead+2)
	}
}
