package history

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

func TestStoredRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Offset: 1, Time: 0, Data: []byte(`{}`)},
		{Offset: 18446744073709551615 >> 1, Time: 1764000000000, Data: []byte(`{"a":"b c"}`)},
		{Offset: 42, Time: 7, Data: []byte(`"x y"`)},
	} {
		got, err := DecodeStored(string(AppendStored(nil, m)))
		if err != nil || got.Offset != m.Offset || got.Time != m.Time || !bytes.Equal(got.Data, m.Data) {
			t.Errorf("round trip of %+v: %+v, %v", m, got, err)
		}
	}
}

func TestDecodeStoredRejects(t *testing.T) {
	for _, give := range []string{
		"", "1", "1 ", "1 2", "1 2 ", "0 1 {}", "01 1 {}", "-1 1 {}", "1 -1 {}",
		"1 2 {", "1 2 \xff", "99999999999999999999 1 {}", "1 99999999999999999999 {}", "a 1 {}",
	} {
		if _, err := DecodeStored(give); err == nil {
			t.Errorf("DecodeStored(%q) accepted", give)
		}
	}
}

func FuzzDecodeStored(f *testing.F) {
	f.Add("1 2 {}")
	f.Add("18446744073709551615 1 []")
	f.Add("3 1764000000000 {\"a\":1}")
	f.Add("1 2 \"\xff\"")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := DecodeStored(s)
		if err != nil {
			return
		}
		if m.Offset == 0 || len(m.Data) == 0 {
			t.Fatalf("accepted %q as %+v", s, m)
		}
		again, err := DecodeStored(string(AppendStored(nil, m)))
		if err != nil || again.Offset != m.Offset || again.Time != m.Time || !bytes.Equal(again.Data, m.Data) {
			t.Fatalf("re-encoding %q: %+v, %v", s, again, err)
		}
	})
}

// A page decoded into one buffer reads exactly as each message decoded on
// its own, whatever is malformed among them and whatever the buffer takes
// after a message.
func TestDecodeStoredIntoOneBuffer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		items := rapid.SliceOf(rapid.OneOf(
			rapid.Custom(func(t *rapid.T) string {
				m := Message{
					Offset: rapid.Uint64Range(1, 1<<40).Draw(t, "offset"),
					Time:   rapid.Int64Range(0, 1<<42).Draw(t, "time"),
					Data:   []byte(rapid.SampledFrom([]string{`1`, `"a b"`, `{"x":[1,2]}`, `[]`, `"\u00e9"`}).Draw(t, "data")),
				}
				return string(AppendStored(nil, m))
			}),
			rapid.SampledFrom([]string{"", "1 2 {", "0 1 {}", "1 2 \"\xff\"", "1 2 nul"}),
		)).Draw(t, "items")
		size := 0
		for _, s := range items {
			size += len(s)
		}
		buf := make([]byte, 0, size)
		var got []Message
		for _, s := range items {
			var m Message
			var err error
			m, buf, err = decodeStoredInto(buf, s)
			_, wantErr := DecodeStored(s)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("%q: error %v, alone %v", s, err, wantErr)
			}
			if err == nil {
				got = append(got, m)
			}
		}
		i := 0
		for _, s := range items {
			want, err := DecodeStored(s)
			if err != nil {
				continue
			}
			if m := got[i]; m.Offset != want.Offset || m.Time != want.Time || !bytes.Equal(m.Data, want.Data) {
				t.Fatalf("%q decoded in the page as %+v, alone as %+v", s, m, want)
			}
			i++
		}
	})
}
