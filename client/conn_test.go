package client

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rtserver/rtserver/protocol"
)

func TestFastMessage(t *testing.T) {
	tests := []struct {
		give      string
		wantOK    bool
		wantTopic string
		wantData  string
	}{
		{string(protocol.AppendMessage(nil, "room.1", json.RawMessage(`{"a":[1,2]}`))), true, "room.1", `{"a":[1,2]}`},
		{string(protocol.AppendMessage(nil, "a", json.RawMessage(`"x}}"`))) + "\n", true, "a", `"x}}"`},
		{`{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":1,"x":2}}`, false, "", ""},
		{`{"jsonrpc":"2.0","method":"message","params":{"topic":"a b","data":1}}`, false, "", ""},
		{`{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":}}`, false, "", ""},
		{`{"method":"message","jsonrpc":"2.0","params":{"topic":"a","data":1}}`, false, "", ""},
	}
	for _, tt := range tests {
		topic, data, ok := fastMessage([]byte(tt.give))
		if ok != tt.wantOK || topic != tt.wantTopic || string(data) != tt.wantData {
			t.Errorf("fastMessage(%s) = %q, %s, %v; want %q, %s, %v", tt.give, topic, data, ok, tt.wantTopic, tt.wantData, tt.wantOK)
		}
	}
}

// FuzzFastMessage: whatever the fast path accepts, encoding/json reads
// the same way.
func FuzzFastMessage(f *testing.F) {
	f.Add([]byte(protocol.AppendMessage(nil, "t", json.RawMessage(`{"k":"v"}`))))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":1,"x":2}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":[1]}} `))
	f.Fuzz(func(t *testing.T, b []byte) {
		topic, data, ok := fastMessage(b)
		if !ok {
			return
		}
		var m struct {
			Method string
			Params struct {
				Topic string
				Data  json.RawMessage
			}
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects: %v", err)
		}
		if m.Method != "message" || m.Params.Topic != topic || !bytes.Equal(m.Params.Data, data) {
			t.Fatalf("fast path read (%q, %s), encoding/json (%q, %q, %s)", topic, data, m.Method, m.Params.Topic, m.Params.Data)
		}
	})
}

// FuzzEachElement: the batch splitter agrees with encoding/json on every
// valid array.
func FuzzEachElement(f *testing.F) {
	for _, s := range []string{`[]`, `[1]`, ` [ 1 , "a,]\"" , {"b":[1,{}]} , [] , null ] `, `[{"jsonrpc":"2.0","id":1,"result":{}},{"x":"]"}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want []json.RawMessage
		if json.Unmarshal(b, &want) != nil {
			return
		}
		var got [][]byte
		eachElement(bytes.TrimLeft(b, " \t\r\n"), func(e []byte) bool {
			got = append(got, e)
			return true
		})
		if len(got) != len(want) {
			t.Fatalf("split %s into %d elements, want %d", b, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("element %d: %q, want %q", i, got[i], want[i])
			}
		}
	})
}
