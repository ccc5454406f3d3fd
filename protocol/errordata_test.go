package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// marshalled is what AppendError wrote before refusal data was appended
// by hand: the whole answer through encoding/json.
func marshalled(t testing.TB, id json.RawMessage, e *Error) []byte {
	t.Helper()
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *Error          `json:"error"`
	}{"2.0", id, e})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every refusal's data encodes to exactly json.Marshal's bytes, whatever
// its strings hold (escapes, HTML characters, invalid UTF-8) and numbers.
func FuzzErrorDataMatchesMarshal(f *testing.F) {
	f.Add("publish", "MEMORY", "room:1", int64(1500), int64(50), int64(0))
	f.Add("a<b>&c", "COST", "\x00\"\\\u2028", int64(-1), int64(1<<62), int64(-7))
	f.Add("\xff\xfe", "é", "", int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, class, reason, topic string, retry, limit, remaining int64) {
		for _, data := range []any{
			OverloadedData{Class: class, Reason: reason, RetryAfterMs: retry},
			RateLimitedData{Class: class, RetryAfterMs: retry, Limit: limit, Remaining: remaining},
			RateLimitedData{Class: class, RetryAfterMs: retry, Limit: limit, Remaining: remaining, Reason: reason},
			TopicData{Topic: topic},
			LimitData{Limit: int(limit)},
		} {
			e := NewError(CodeOverloaded, "", data)
			got := AppendError(nil, json.RawMessage(`7`), e)
			if want := marshalled(t, json.RawMessage(`7`), e); !bytes.Equal(got, want) {
				t.Fatalf("%#v:\n got %s\nwant %s", data, got, want)
			}
		}
	})
}

// Data of any other type is still marshalled.
func TestErrorDataOtherTypesMarshalled(t *testing.T) {
	e := NewError(CodeInvalidParams, "bad", map[string]int{"x": 1})
	got := AppendError(nil, nil, e)
	if want := marshalled(t, json.RawMessage(`null`), e); !bytes.Equal(got, want) {
		t.Fatalf("got %s want %s", got, want)
	}
}

// BenchmarkAppendErrorShed is the answer to a shed publish.
func BenchmarkAppendErrorShed(b *testing.B) {
	id := json.RawMessage(`12345`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		e := NewError(CodeRateLimited, "", RateLimitedData{Class: "publish", RetryAfterMs: 20, Limit: 50})
		buf = AppendError(buf[:0], id, e)
	}
}
