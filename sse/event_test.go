package sse

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Every id a session writes is read back as the same positions: what a
// reconnecting EventSource presents recovers every history topic.
func TestEventIDRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var topics []string
		var pos []position
		want := map[string]position{}
		for i := range r.IntN(5) + 1 {
			topic := "room:" + strconv.Itoa(i) + ":a.b/c@d-e_f"
			topics = append(topics, topic)
			pos = append(pos, position{})
			if r.IntN(2) == 0 {
				pos[i] = position{epoch: strconv.FormatUint(r.Uint64(), 36), offset: r.Uint64()}
				want[topic] = pos[i]
			}
		}
		got := parseLastEventID(string(appendEventID(nil, topics, pos)))
		if len(got) != len(want) {
			t.Fatalf("%d positions back, want %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %+v, want %+v", k, got[k], v)
			}
		}
	}
}

// A Last-Event-ID is the client's: whatever it holds, parsing never
// panics and keeps only positions a subscribe can carry.
func FuzzParseLastEventID(f *testing.F) {
	f.Add("3:ab12cd34:room:a")
	f.Add("1:e:t,2:e2:u")
	f.Add("::,,:")
	f.Add("18446744073709551616:e:t")
	f.Fuzz(func(t *testing.T, id string) {
		for topic, p := range parseLastEventID(id) {
			if !validEpoch(p.epoch) || topic == "" {
				t.Fatalf("kept %q %+v", topic, p)
			}
		}
	})
}

// Data with line breaks becomes one data line per line: EventSource
// joins them with "\n", which leaves JSON meaning the same.
func TestEventDataLines(t *testing.T) {
	got := string(appendEvent(nil, "x", []byte("1:e:t"), []byte("{\"a\":\r\n1,\r\"b\":\n2}")))
	want := "event: x\nid: 1:e:t\ndata: {\"a\":\ndata: \ndata: 1,\ndata: \"b\":\ndata: 2}\n\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// The frames the pipe queues are read back by a frame reader as sent,
// at every size class of the length field.
func TestClientFrameSizes(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 70000} {
		payload := bytes.Repeat([]byte{'x'}, n)
		f := appendClientFrame(nil, opText, payload)
		// A client frame is a server frame with the mask bit and key.
		op, got, end := nextServerFrame(f)
		if op != opText || !bytes.Equal(got, payload) || end != len(f) {
			t.Fatalf("n=%d: op %d, %d bytes, end %d of %d", n, op, len(got), end, len(f))
		}
		if _, _, end := nextServerFrame(f[:len(f)-1]); n > 0 && end != 0 {
			t.Fatalf("n=%d: a cut frame read as whole", n)
		}
	}
}

func TestMessagePosition(t *testing.T) {
	topic, off, ok := messagePosition([]byte(`{"topic":"room:a","offset":42,"data":1}`))
	if !ok || topic != "room:a" || off != 42 {
		t.Fatalf("%q %d %v", topic, off, ok)
	}
	if _, _, ok := messagePosition([]byte(`{"topic":"room:a","data":1}`)); ok {
		t.Fatal("a message without offset has a position")
	}
}
