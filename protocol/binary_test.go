package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// sameJSON reports whether a and b are the same JSON value (members in
// any order, numbers as float64s).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	for _, x := range []struct {
		b []byte
		v *any
	}{{a, &va}, {b, &vb}} {
		if err := json.Unmarshal(x.b, x.v); err != nil {
			t.Fatalf("%s: %v", x.b, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}

func TestBinaryRoundTripOfJSON(t *testing.T) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"x":[1,-1,-33,300,-70000,1.5,1e300,true,false,null,"é\n\"\\\u0001"]}}}`,
		`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":"b","method":"b","params":[]}]`,
		`{"jsonrpc":"2.0","method":"message","params":{"topic":"t","data":{"$bin":"AAEC/w=="}}}`,
		`{"a":{"$bin":"AAEC/w=="},"jsonrpc":"1.0"}`,
		`{"$bin":"not base64!"}`, `{"$bin":"AA==","x":1}`, `{}`, `[]`, `"s"`, `18446744073709551615`, `-9223372036854775808`, `1e999`,
		`{"k":"` + strings.Repeat("x", 70000) + `","l":[` + strings.Repeat("0,", 20) + `0]}`,
	} {
		bin, ok := JSONToBinary(nil, []byte(s))
		if !ok {
			t.Fatalf("%s: not transcoded", s)
		}
		back, perr := BinaryToJSON(nil, bin, 0)
		if perr != nil {
			t.Fatalf("%s: back: %v", s, perr)
		}
		want := s
		switch s {
		case `1e999`:
			want = `1.7976931348623157e308` // the largest float64
		case `{"a":{"$bin":"AAEC/w=="},"jsonrpc":"1.0"}`:
		default:
			if s[0] == '{' && !strings.HasPrefix(s, `{"jsonrpc"`) {
				want = `{"jsonrpc":"2.0",` + s[1:] // a request object gains it
				if s == `{}` {
					want = `{"jsonrpc":"2.0"}`
				}
			}
		}
		if !sameJSON(t, []byte(want), back) {
			t.Errorf("%s came back as %s", s, back)
		}
	}
}

func TestBinaryRequestLeavesOutJSONRPC(t *testing.T) {
	bin, _ := JSONToBinary(nil, []byte(`{"jsonrpc":"2.0","id":7,"result":{}}`))
	if bytes.Contains(bin, []byte("jsonrpc")) {
		t.Fatalf("answer kept jsonrpc: %q", bin)
	}
	req := AppendMsgpackMapHead(nil, 2)
	req = AppendMsgpackStr(req, "id")
	req = AppendMsgpackUint(req, 1)
	req = AppendMsgpackStr(req, "method")
	req = AppendMsgpackStr(req, "publish")
	js, perr := BinaryToJSON(nil, req, 0)
	if perr != nil || string(js) != `{"jsonrpc":"2.0","id":1,"method":"publish"}` {
		t.Fatalf("got %s, %v", js, perr)
	}
	f, ferr := Decode(js)
	if ferr != nil || f.Requests[0].Err != nil || f.Requests[0].Method != "publish" {
		t.Fatalf("not a request: %v %+v", ferr, f)
	}
}

func TestBinaryBytesBecomeTheirJSONForm(t *testing.T) {
	raw := []byte{0, 1, 2, 0xff, '"'}
	v := AppendMsgpackMapHead(nil, 1)
	v = AppendMsgpackStr(v, "data")
	v = AppendMsgpackBin(v, raw)
	js, perr := BinaryToJSON(nil, v, 0)
	if perr != nil || string(js) != `{"jsonrpc":"2.0","data":{"$bin":"AAEC/yI="}}` {
		t.Fatalf("got %s, %v", js, perr)
	}
	if b, ok := BytesOf([]byte(`{"$bin":"AAEC/yI="}`)); !ok || !bytes.Equal(b, raw) {
		t.Fatalf("BytesOf: %v %v", b, ok)
	}
	m, ok := AppendBinaryMessage(nil, "t", 3, []byte(`{"$bin":"AAEC/yI="}`))
	if !ok || !bytes.HasSuffix(m, append([]byte{mpBin8, byte(len(raw))}, raw...)) {
		t.Fatalf("message: %q", m)
	}
	back, perr := BinaryToJSON(nil, m, 0)
	if perr != nil || !sameJSON(t, back, AppendMessageAt([]byte(rpcPrefix), "t", 3, []byte(`{"$bin":"AAEC/yI="}`))[len(rpcPrefix):]) {
		t.Fatalf("message reads back as %s (%v)", back, perr)
	}
}

const rpcPrefix = ""

func TestBinaryToJSONRefuses(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, 70)
	deep = append(deep, 0xc0)
	for name, c := range map[string]struct {
		in   []byte
		code int
	}{
		"empty":        {nil, CodeParseError},
		"trailing":     {[]byte{0xc0, 0xc0}, CodeParseError},
		"short str":    {[]byte{0xa5, 'a'}, CodeParseError},
		"bad utf8":     {[]byte{0xa1, 0xff}, CodeParseError},
		"int key":      {[]byte{0x81, 0x01, 0x01}, CodeParseError},
		"ext":          {[]byte{0xd4, 0x01, 0x01}, CodeParseError},
		"never used":   {[]byte{0xc1}, CodeParseError},
		"nan":          {[]byte{mpFloat64, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1}, CodeParseError},
		"huge array":   {[]byte{mpArray32, 0xff, 0xff, 0xff, 0xff}, CodeParseError},
		"too deep":     {deep, CodeInvalidRequest},
		"huge bin len": {[]byte{mpBin32, 0x7f, 0xff, 0xff, 0xff, 0}, CodeParseError},
	} {
		_, perr := BinaryToJSON(nil, c.in, 0)
		if perr == nil || perr.Code != c.code {
			t.Errorf("%s: got %v, want code %d", name, perr, c.code)
		}
	}
}
