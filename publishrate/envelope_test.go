package publishrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rtserver/rtserver/internal/envsign"
	"github.com/rtserver/rtserver/metrics"
)

var secret = []byte("s3cret")

func TestEnvelopeRoundTrip(t *testing.T) {
	give := &envelope{V: 1, InstanceID: "A", TS: 1700000000000,
		Slice: []wireTopic{{"chat:room-7", 12.5, 900, 0}},
		Users: []wireUser{{"ünïcode user", 3}},
		Subs:  []wireSub{{"chat:room-7", 7}},
	}
	for _, key := range [][]byte{nil, secret} {
		b, err := marshalEnvelope(give, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeEnvelope(string(b), envsign.New(key), DefaultMaxEnvelopeBytes, 64)
		if err != nil {
			t.Fatalf("key %q: %v\n%s", key, err, b)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(give)
		if !bytes.Equal(gb, wb) {
			t.Errorf("round trip:\n%s\nwant\n%s", gb, wb)
		}
	}
}

// TestSignatureCoversBody pins the documented scheme: the payload is the
// unsigned body with `,"sig":"<hex>"}` in place of its final `}`.
func TestSignatureCoversBody(t *testing.T) {
	e := &envelope{V: 1, InstanceID: "A", TS: 1, Slice: []wireTopic{}, Users: []wireUser{}}
	body, _ := marshalEnvelope(e, nil)
	signed, _ := marshalEnvelope(e, secret)
	if want := string(body[:len(body)-1]) + `,"sig":"`; !strings.HasPrefix(string(signed), want) {
		t.Fatalf("signed = %s, want prefix %s", signed, want)
	}
	const want = `{"v":1,"instanceId":"A","ts":1,"slice":[],"users":[],"sig":"`
	if !strings.HasPrefix(string(signed), want) || !strings.HasSuffix(string(signed), `"}`) || len(signed) != len(want)+64+2 {
		t.Errorf("signed envelope = %s", signed)
	}
	var m map[string]any
	if err := json.Unmarshal(signed, &m); err != nil || len(m["sig"].(string)) != 64 {
		t.Errorf("signed envelope is not the JSON of the contract: %v %v", err, m)
	}
}

func TestSignedEnvelopes(t *testing.T) {
	good, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS, Slice: []wireTopic{{"hot", 600, 1, 0}}}, secret)
	unsigned, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS, Slice: []wireTopic{{"hot", 600, 1, 0}}}, nil)
	forged, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS, Slice: []wireTopic{{"hot", 600, 1, 0}}}, []byte("other"))
	tampered := bytes.Replace(good, []byte("600"), []byte("900"), 1)
	cut := len(good) - sigTailLen
	sigFirst := []byte(`{"sig":"` + string(good[cut+len(sigPrefix):len(good)-2]) + `",` + string(unsigned[1:]))
	upperHex := append(append([]byte{}, good[:cut+len(sigPrefix)]...), bytes.ToUpper(good[cut+len(sigPrefix):])...)
	upperHex = append(upperHex[:len(upperHex)-2], '"', '}')

	tests := []struct {
		name    string
		give    []byte
		wantErr error
	}{
		{"signed", good, nil},
		{"hex in upper case", upperHex, nil},
		{"unsigned", unsigned, errUnsigned},
		{"signed with another secret", forged, errForged},
		{"tampered body", tampered, errForged},
		{"sig not last", sigFirst, errUnsigned},
		{"trailing newline", append(append([]byte{}, good...), '\n'), errUnsigned},
		{"sig not hex", append(append([]byte{}, good[:cut+len(sigPrefix)]...), strings.Repeat("z", 64)+`"}`...), errForged},
		{"empty", nil, errUnsigned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.NewDiscard()
			a := newOffline(t, newFakeLocal(), Options{HMACSecret: secret}, Deps{Metrics: m})
			_, err := decodeEnvelope(string(tt.give), envsign.New(secret), DefaultMaxEnvelopeBytes, 64)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("decode: err = %v, want %v", err, tt.wantErr)
			}
			a.receive(string(tt.give))
			wantRate, wantErrs := 600.0, 0.0
			if tt.wantErr != nil {
				wantRate, wantErrs = 0, 1
			}
			if a.RateOf("hot") != wantRate || value(m.ClusterParseErrors) != wantErrs || value(m.ClusterReceived) != 1-wantErrs {
				t.Errorf("RateOf %v parseErrors %v received %v", a.RateOf("hot"), value(m.ClusterParseErrors), value(m.ClusterReceived))
			}
		})
	}

	// A receiver without a secret takes signed envelopes too (sig ignored).
	b := newOffline(t, newFakeLocal(), Options{}, Deps{})
	b.receive(string(good))
	if b.RateOf("hot") != 600 {
		t.Errorf("receiver without secret: RateOf = %v, want 600", b.RateOf("hot"))
	}
}

func TestHostileEnvelopes(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	tests := []struct {
		name string
		give string
	}{
		{"garbage", "\x00\xff not json"},
		{"empty", ""},
		{"array", `[1,2]`},
		{"null", `null`},
		{"truncated", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot"`},
		{"huge", `{"v":1,"instanceId":"A","ts":1,"pad":"` + strings.Repeat("x", DefaultMaxEnvelopeBytes) + `"}`},
		{"NaN literal", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":NaN,"bytesPerSec":1}]}`},
		{"NaN string", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":"NaN","bytesPerSec":1}]}`},
		{"Infinity", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":Infinity,"bytesPerSec":1}]}`},
		{"overflowing number", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":1e400,"bytesPerSec":1}]}`},
		{"absurd rate", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":1e300,"bytesPerSec":1}]}`},
		{"negative rate", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":-5,"bytesPerSec":1}]}`},
		{"negative bytes", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":-1}]}`},
		{"wrong v", `{"v":2,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"missing v", `{"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"v as string", `{"v":"1","instanceId":"A","ts":1,"slice":[]}`},
		{"missing instanceId", `{"v":1,"ts":1,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"long instanceId", `{"v":1,"instanceId":"` + strings.Repeat("a", MaxInstanceIDLen+1) + `","ts":1,"slice":[]}`},
		{"instanceId with spaces", `{"v":1,"instanceId":"a b","ts":1,"slice":[]}`},
		{"bad topic", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot topic","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"empty topic", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"long topic", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"` + strings.Repeat("t", 257) + `","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"duplicate topic", `{"v":1,"instanceId":"A","ts":1,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1},{"topic":"hot","messagesPerSec":5,"bytesPerSec":1}]}`},
		{"too many entries", `{"v":1,"instanceId":"A","ts":1,"slice":[` + many(65, func(i int) string {
			return fmt.Sprintf(`{"topic":"t%d","messagesPerSec":1,"bytesPerSec":1}`, i)
		}) + `]}`},
		{"slice not an array", `{"v":1,"instanceId":"A","ts":1,"slice":{"topic":"hot"}}`},
		{"empty user", `{"v":1,"instanceId":"A","ts":1,"users":[{"user":"","messagesPerSec":1}]}`},
		// (invalid UTF-8 in a user id is not an error: encoding/json turns it into U+FFFD)
		{"long user", `{"v":1,"instanceId":"A","ts":1,"users":[{"user":"` + strings.Repeat("u", MaxUserLen+1) + `","messagesPerSec":1}]}`},
		{"negative user rate", `{"v":1,"instanceId":"A","ts":1,"users":[{"user":"u","messagesPerSec":-1}]}`},
		{"duplicate user", `{"v":1,"instanceId":"A","ts":1,"users":[{"user":"u","messagesPerSec":1},{"user":"u","messagesPerSec":1}]}`},
		{"negative count", `{"v":1,"instanceId":"A","ts":1,"subs":[{"topic":"hot","count":-1}]}`},
		{"fractional count", `{"v":1,"instanceId":"A","ts":1,"subs":[{"topic":"hot","count":1.5}]}`},
		{"absurd count", `{"v":1,"instanceId":"A","ts":1,"subs":[{"topic":"hot","count":9007199254740993}]}`},
		{"bad subs topic", `{"v":1,"instanceId":"A","ts":1,"subs":[{"topic":"#","count":1}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.NewDiscard()
			a := newOffline(t, newFakeLocal(), Options{}, Deps{Metrics: m})
			a.receive(string([]byte(tt.give)))
			if value(m.ClusterParseErrors) != 1 || value(m.ClusterReceived) != 0 || a.Stats().Instances != 0 ||
				a.RateOf("hot") != 0 || a.RateOfUser("u") != 0 || a.SubscribersOf("hot") != 0 {
				t.Errorf("not dropped: parseErrors %v received %v stats %+v", value(m.ClusterParseErrors), value(m.ClusterReceived), a.Stats())
			}
		})
	}
}

func TestTolerantEnvelopes(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		wantRate float64
	}{
		{"unknown fields", `{"v":1,"instanceId":"A","ts":1700000000001,"region":"eu","slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1,"p99":3}],"extra":{"a":[1]}}`, 5},
		{"no users, no subs, no sig", `{"v":1,"instanceId":"A","ts":1700000000001,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1}]}`, 5},
		{"sig without a secret", `{"v":1,"instanceId":"A","ts":1700000000001,"slice":[{"topic":"hot","messagesPerSec":5,"bytesPerSec":1}],"sig":"00"}`, 5},
		{"no slice", `{"v":1,"instanceId":"A","ts":1700000000001}`, 0},
		{"whitespace", " {\n \"v\": 1, \"instanceId\": \"A\", \"ts\": 1700000000001, \"slice\": [ {\"topic\": \"hot\", \"messagesPerSec\": 2.5e0, \"bytesPerSec\": 0} ] }\n", 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.NewDiscard()
			a := newOffline(t, newFakeLocal(), Options{}, Deps{Metrics: m})
			a.receive(string([]byte(tt.give)))
			if value(m.ClusterParseErrors) != 0 || value(m.ClusterReceived) != 1 || a.Stats().Instances != 1 || a.RateOf("hot") != tt.wantRate {
				t.Errorf("parseErrors %v received %v RateOf %v", value(m.ClusterParseErrors), value(m.ClusterReceived), a.RateOf("hot"))
			}
		})
	}
}

func FuzzEnvelope(f *testing.F) {
	good, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS, Slice: []wireTopic{{"hot", 1, 2, 0}}, Users: []wireUser{{"u", 1}}, Subs: []wireSub{{"hot", 3}}}, nil)
	signed, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS, Slice: []wireTopic{{"hot", 1, 2, 0}}}, secret)
	view, _ := marshalEnvelope(&envelope{V: 2, InstanceID: "M", TS: testTS, Epoch: 3, Instances: 4, Slice: []wireTopic{{"hot", 1, 2, 4}}, Users: []wireUser{{"u", 1}}}, secret)
	for _, s := range [][]byte{good, signed, view, []byte(`{}`), []byte(`{"v":1}`), []byte(`{,"sig":"` + strings.Repeat("0", 64) + `"}`), []byte("\xff")} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, withSecret bool) {
		var key []byte
		if withSecret {
			key = secret
		}
		// The same bytes as a slice and as a merged view.
		for _, version := range []int{envelopeVersion, viewVersion} {
			e, err := decodeVersion(string(b), version, envsign.New(key), 4096, 64)
			if err != nil {
				continue
			}
			if err := e.validate(version, 64); err != nil {
				t.Fatalf("accepted an invalid envelope: %v", err)
			}
			// What was accepted re-encodes and decodes to the same thing.
			again, err := marshalEnvelope(e, key)
			if err != nil {
				t.Fatal(err)
			}
			e2, err := decodeVersion(string(again), version, envsign.New(key), 1<<20, 64)
			if err != nil {
				t.Fatalf("re-encoded envelope rejected: %v\n%s", err, again)
			}
			if a, b := fmt.Sprint(e), fmt.Sprint(e2); a != b {
				t.Fatalf("round trip changed it:\n%s\n%s", a, b)
			}
		}
		// And the aggregator takes it without panicking, in either mode.
		a := newOffline(t, newFakeLocal(), Options{HMACSecret: key, maxEnvelopeBytes: 4096}, Deps{})
		a.receive(string(b))
		_ = a.TopPublishers()
		m := newOffline(t, newFakeLocal(), Options{HMACSecret: key, maxEnvelopeBytes: 4096, Mode: ModeMerged}, Deps{})
		m.receiveView(string(b))
		_ = m.TopPublishers()
	})
}
