package protocol

import (
	"encoding/json"
	"testing"
)

func TestDecodeHistoryParams(t *testing.T) {
	h, perr := DecodeHistoryParams(json.RawMessage(`{"topic":"a","recover":true,"since":{"offset":7,"epoch":"ab"},"idempotencyKey":"k","limit":5}`))
	if perr != nil || !h.Recover || h.Since == nil || h.Since.Offset != 7 || h.Since.Epoch != "ab" || h.IdempotencyKey != "k" || h.Limit != 5 {
		t.Fatalf("got %+v %v", h, perr)
	}
	for _, give := range []string{
		`{"recover":1}`, `{"since":1}`, `{"since":{"offset":-1,"epoch":"a"}}`, `{"since":{"offset":1.5,"epoch":"a"}}`,
		`{"since":{"offset":1}}`, `{"since":{"offset":1,"epoch":""}}`, `{"since":{"offset":1,"epoch":"a","epoch":"b"}}`,
		`{"idempotencyKey":""}`, `{"idempotencyKey":1}`, `{"idempotencyKey":"` + string(make([]byte, 65)) + `"}`,
		`{"limit":0}`, `{"limit":1001}`, `{"limit":"1"}`, `{"recover":true,"recover":false}`,
	} {
		if _, perr := DecodeHistoryParams(json.RawMessage(give)); perr == nil {
			t.Errorf("accepted %s", give)
		}
	}
}

func TestAppendHistoryFrames(t *testing.T) {
	for _, b := range [][]byte{
		AppendMessageAt(nil, "t\"x", 3, json.RawMessage(`{"a":1}`)),
		AppendResync(nil, "t"),
		AppendRecovered(nil, "e", 4, false, RecoverTrimmed),
		AppendRecovered(nil, "e", 4, true, ""),
	} {
		if !json.Valid(b) {
			t.Errorf("invalid JSON: %s", b)
		}
	}
}

func FuzzDecodeHistoryParams(f *testing.F) {
	f.Add(`{"topic":"a","recover":true,"since":{"offset":7,"epoch":"ab"},"idempotencyKey":"k","limit":5}`)
	f.Add(`{"since":{"offset":18446744073709551615,"epoch":"\u00e9"}}`)
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) || len(s) == 0 || s[0] != '{' {
			return
		}
		h, perr := DecodeHistoryParams(json.RawMessage(s))
		if perr != nil {
			return
		}
		if len(h.IdempotencyKey) > MaxIdempotencyKey || h.Limit < 0 || h.Limit > MaxHistoryLimit ||
			(h.Since != nil && (h.Since.Epoch == "" || len(h.Since.Epoch) > 32)) {
			t.Fatalf("accepted %s as %+v", s, h)
		}
	})
}
