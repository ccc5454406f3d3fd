package bus

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/protocol"
)

func TestEnvelopeLayout(t *testing.T) {
	got := appendEnvelope(nil, "i1", "room", []byte(`{"a":1}`))
	want := "\x01\x02i1\x04room{\"a\":1}"
	if string(got) != want {
		t.Errorf("envelope %q, want %q", got, want)
	}
	if envelopeLen("i1", "room", []byte(`{"a":1}`)) != len(want) {
		t.Error("envelopeLen disagrees with appendEnvelope")
	}
}

func TestDecodeEnvelope(t *testing.T) {
	env := func(inst, topic, data string) string {
		return string(appendEnvelope(nil, inst, topic, []byte(data)))
	}
	tests := []struct {
		name      string
		give      string
		wantTopic string
		wantData  string
		wantOwn   bool
		wantDrop  string
	}{
		{"valid", env("x", "room", `{"a":1}`), "room", `{"a":1}`, false, ""},
		{"own echo", env("me", "room", "1"), "", "", true, ""},
		{"own echo with a bad topic is still silent", env("me", "a b", "1"), "", "", true, ""},
		{"longest topic", env("x", strings.Repeat("t", 256), "1"), strings.Repeat("t", 256), "1", false, ""},
		{"topic too long", env("x", strings.Repeat("t", 257), "1"), "", "", false, DropBadTopic},
		{"reserved", env("x", "__r", "1"), "", "", false, DropBadTopic},
		{"bad byte", env("x", "r\x00", "1"), "", "", false, DropBadTopic},
		{"wrong version", "\x02" + env("x", "room", "1")[1:], "", "", false, DropMalformed},
		{"empty", "", "", "", false, DropMalformed},
		{"topic length past the end", "\x01\x01x\x7froom", "", "", false, DropMalformed},
		{"unterminated varint", "\x01\xff\xff\xff\xff", "", "", false, DropMalformed},
		{"oversize", env("x", "room", strings.Repeat("1", 300)), "", "", false, DropOversize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic, data, own, drop := decodeEnvelope(tt.give, "me", 300)
			if topic != tt.wantTopic || data != tt.wantData || own != tt.wantOwn || drop != tt.wantDrop {
				t.Errorf("got (%q, %q, %v, %q), want (%q, %q, %v, %q)",
					topic, data, own, drop, tt.wantTopic, tt.wantData, tt.wantOwn, tt.wantDrop)
			}
		})
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		inst := rapid.StringN(0, MaxInstanceIDLen, MaxInstanceIDLen).Draw(t, "instance")
		topic := rapid.StringMatching(`[A-Za-z0-9_.:/@-]{1,256}`).Draw(t, "topic")
		data := rapid.SliceOf(rapid.Byte()).Draw(t, "data")
		env := appendEnvelope(nil, inst, topic, data)
		if len(env) != envelopeLen(inst, topic, data) {
			t.Fatalf("length %d, envelopeLen %d", len(env), envelopeLen(inst, topic, data))
		}
		gotTopic, gotData, own, drop := decodeEnvelope(string(env), inst+"-other", DefaultMaxEnvelopeBytes)
		if own {
			t.Fatal("a different instance's envelope taken as own")
		}
		if protocol.Reserved(topic) {
			if drop != DropBadTopic {
				t.Fatalf("reserved topic: drop %q", drop)
			}
			return
		}
		if drop != "" || gotTopic != topic || gotData != string(data) {
			t.Fatalf("got (%q, %q, %q)", gotTopic, gotData, drop)
		}
		if _, _, own, _ := decodeEnvelope(string(env), inst, DefaultMaxEnvelopeBytes); !own {
			t.Fatal("own envelope not recognised")
		}
	})
}

// FuzzDecodeEnvelope feeds hostile payloads through the whole receive-side
// validation: it must never panic, and whatever it accepts must satisfy
// what Receiver.Deliver promises.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, seed := range []string{
		"",
		"\x01",
		"\x01\x00\x00",
		string(appendEnvelope(nil, "x", "room", []byte(`{"a":[1,2,{"b":null}]}`))),
		string(appendEnvelope(nil, "me", "room", []byte(`1`))),
		string(appendEnvelope(nil, "x", "__sys", []byte(`1`))),
		string(appendEnvelope(nil, "x", "room", []byte(`{"a":`))),
		"\x01\x80\x80\x80\x80\x01",
		"\x01\x05ab",
		`{"i":"x","t":"room","d":1}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		topic, data, own, drop := decodeEnvelope(p, "me", 4096)
		switch {
		case own:
			if drop != "" || topic != "" {
				t.Fatalf("own envelope with (%q, %q)", topic, drop)
			}
		case drop != "":
			switch drop {
			case DropOversize, DropMalformed, DropBadTopic:
			default:
				t.Fatalf("unknown drop reason %q", drop)
			}
		default:
			if !protocol.ValidTopic(topic) || protocol.Reserved(topic) {
				t.Fatalf("accepted topic %q", topic)
			}
			if len(p) > 4096 {
				t.Fatal("accepted an envelope over the cap")
			}
			if want := json.Valid([]byte(data)) && utf8.ValidString(data); validData([]byte(data)) != want && len(data) > 0 {
				t.Fatal("validData disagrees with json.Valid and utf8.Valid")
			}
		}
	})
}

// Invalid UTF-8 inside a JSON string passes json.Valid, but a browser
// fails its connection on it: such data is dropped as malformed.
func TestValidDataRefusesInvalidUTF8(t *testing.T) {
	for data, want := range map[string]bool{`"ok"`: true, `"é"`: true, "\"\xff\xfe\"": false, `{"a":"` + "\xc3" + `"}`: false, ``: false} {
		if got := validData([]byte(data)); got != want {
			t.Errorf("validData(%q) = %v, want %v", data, got, want)
		}
	}
}
