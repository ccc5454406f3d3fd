package protocol

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// FuzzBinaryToJSON: no bytes a client sends on the binary protocol panic
// its decoder; what it accepts is valid JSON (the server runs it as a
// JSON frame, and JSON subscribers may receive parts of it), and the
// MessagePack the server would send back for that JSON reads as the same
// value again.
func FuzzBinaryToJSON(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":{"$bin":"AAEC/w=="}}}`,
		`[{"method":"a"},{"id":"b","method":"b","params":[1.5,-7,null,true]}]`,
		`{"id":1,"method":"subscribe","params":{"topic":"t","recover":true,"since":{"offset":3,"epoch":"e"}}}`,
	} {
		b, ok := JSONToBinary(nil, []byte(s))
		if !ok {
			f.Fatalf("seed %s", s)
		}
		f.Add(b)
	}
	f.Add([]byte{0xc1})
	f.Add([]byte{mpArray32, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{mpFloat32, 0x7f, 0x80, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		js, perr := BinaryToJSON(nil, b, 16)
		if perr != nil {
			if out := AppendError(nil, nil, perr); !json.Valid(out) {
				t.Fatalf("error answer %s is not JSON", out)
			}
			return
		}
		if !json.Valid(js) {
			t.Fatalf("%x became %q: not JSON", b, js)
		}
		bin, ok := JSONToBinary(nil, js)
		if !ok {
			t.Fatalf("%s: not transcoded back", js)
		}
		again, perr := BinaryToJSON(nil, bin, 16)
		if perr != nil {
			t.Fatalf("%s: its MessagePack %x does not read: %v", js, bin, perr)
		}
		if !sameJSON(t, js, again) {
			t.Fatalf("%s read back as %s", js, again)
		}
	})
}

// FuzzJSONToBinary: every valid JSON (what the server may have to send a
// binary client: any data a client or the application published)
// transcodes, and reads back as the same value.
func FuzzJSONToBinary(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"message","params":{"topic":"t","data":{"$bin":"AAEC/w=="}}}`,
		`[1,-1,1e999,-0,1.5e-7,18446744073709551616,"\u00e9\ud83d\ude00\n",{"$bin":"x"},{"$bin":"AA==","y":1}]`,
		` { "a" : [ true , false , null ] } `, `"\"\\\/"`, `{"jsonrpc":"1.0"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		if !json.Valid(js) {
			return
		}
		bin, ok := JSONToBinary(nil, js)
		if !ok {
			t.Fatalf("valid JSON %q did not transcode", js)
		}
		back, perr := BinaryToJSON(nil, bin, 10001)
		if perr != nil {
			t.Fatalf("%q: its MessagePack %x does not read: %v", js, bin, perr)
		}
		if !sameTranscoded(t, js, back) {
			t.Fatalf("%q read back as %s", js, back)
		}
	})
}

// sameTranscoded reports whether JSON a, transcoded to MessagePack and
// back as b, is the same value: a request object's (or a batch
// element's) "jsonrpc":"2.0" may come and go, and a number past float64's range comes back as the
// largest float64.
func sameTranscoded(t *testing.T, a, b []byte) bool {
	t.Helper()
	va, vb := decodeNumbers(t, a), decodeNumbers(t, b)
	for _, v := range []any{va, vb} {
		envelopes := []any{v}
		if l, ok := v.([]any); ok {
			envelopes = l // a batch's requests
		}
		for _, e := range envelopes {
			if m, ok := e.(map[string]any); ok && m["jsonrpc"] == "2.0" {
				delete(m, "jsonrpc")
			}
		}
	}
	return sameValue(va, vb)
}

func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		return ok && numberValue(a) == numberValue(b)
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func numberValue(n json.Number) float64 {
	f, _ := strconv.ParseFloat(string(n), 64)
	if math.IsInf(f, 0) {
		return math.Copysign(math.MaxFloat64, f)
	}
	return f
}
