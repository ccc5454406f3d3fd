package protocol

import (
	"encoding/json"
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
