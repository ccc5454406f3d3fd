package publishrate

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/envsign"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/pressure"
)

// sent decodes what collect would publish.
func sent(t *testing.T, a *Aggregator, now time.Time) *envelope {
	t.Helper()
	b, err := a.collect(now)
	if err != nil {
		t.Fatal(err)
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if err := e.validate(envelopeVersion, 64); err != nil {
		t.Fatalf("sent envelope does not validate: %v\n%s", err, b)
	}
	return &e
}

func TestBroadcastAveragesOverInterval(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	t0 := clk.Now()
	local := newFakeLocal()
	a := newOffline(t, local, Options{}, Deps{now: clk.Now, InstanceID: "me"})

	sample := func(after time.Duration, topics []pressure.TopicRate, users []pressure.UserRate) {
		clk.Advance(after)
		local.emit(&pressure.Snapshot{At: clk.Now(), TopTopics: topics, TopUsers: users})
	}
	// 1s at 100, 1s at 300 (cold appears), 3s at 600: the time-weighted
	// average is (100*1 + 300*1 + 600*3) / 5 = 440, not the last sample.
	sample(time.Second, []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 100, BytesPerSec: 200}}, []pressure.UserRate{{User: "alice", MessagesPerSec: 10, BytesPerSec: 0}})
	sample(time.Second, []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 300, BytesPerSec: 600}, {Topic: "cold", MessagesPerSec: 50, BytesPerSec: 5}}, nil)
	sample(3*time.Second, []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 600, BytesPerSec: 1200}}, []pressure.UserRate{{User: "alice", MessagesPerSec: 40, BytesPerSec: 0}})

	e := sent(t, a, clk.Now())
	if e.V != 1 || e.InstanceID != "me" || e.TS != clk.Now().UnixMilli() {
		t.Errorf("header v=%d id=%q ts=%d", e.V, e.InstanceID, e.TS)
	}
	wantSlice := []wireTopic{{"hot", 440, 880, 0}, {"cold", 10, 1, 0}}
	if !slices.Equal(e.Slice, wantSlice) {
		t.Errorf("slice = %v, want %v", e.Slice, wantSlice)
	}
	wantUsers := []wireUser{{"alice", 26}} // (10*1 + 0*1 + 40*3) / 5
	if !slices.Equal(e.Users, wantUsers) {
		t.Errorf("users = %v, want %v", e.Users, wantUsers)
	}
	if e.Subs != nil {
		t.Errorf("subs = %v without Subjects, want none", e.Subs)
	}
	if got := clk.Now().Sub(t0); got != 5*time.Second {
		t.Fatalf("clock moved %v", got)
	}

	// A window without samples (sampling slower than broadcasting) reports
	// the latest sample as is.
	clk.Advance(5 * time.Second)
	e = sent(t, a, clk.Now())
	if want := []wireTopic{{"hot", 600, 1200, 0}}; !slices.Equal(e.Slice, want) {
		t.Errorf("empty window: slice = %v, want %v", e.Slice, want)
	}

	// The next window starts where the last one ended: a sample 2s in is
	// weighted 2s, one at the same instant adds no weight.
	sample(2*time.Second, []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 10, BytesPerSec: 0}}, nil)
	sample(0, []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 99999, BytesPerSec: 0}}, nil)
	sample(2*time.Second, []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 30, BytesPerSec: 0}}, nil)
	e = sent(t, a, clk.Now())
	if want := []wireTopic{{"hot", 20, 0, 0}}; !slices.Equal(e.Slice, want) {
		t.Errorf("second window: slice = %v, want %v", e.Slice, want)
	}
}

func TestBroadcastTopNAndSubs(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	local := newFakeLocal(
		pressure.TopicRate{Topic: "a", MessagesPerSec: 1},
		pressure.TopicRate{Topic: "b", MessagesPerSec: 3},
		pressure.TopicRate{Topic: "c", MessagesPerSec: 2},
		pressure.TopicRate{Topic: "bad topic", MessagesPerSec: 100}, // a receiver would reject the whole envelope
		pressure.TopicRate{Topic: "idle"},
	)
	local.snap.TopUsers = []pressure.UserRate{
		{User: "u1", MessagesPerSec: 1}, {User: "u2", MessagesPerSec: 5}, {User: "u3", MessagesPerSec: 4},
		{User: strings.Repeat("x", MaxUserLen+1), MessagesPerSec: 100}, {User: "", MessagesPerSec: 100},
	}
	a := newOffline(t, local, Options{TopN: 2}, Deps{now: clk.Now, Subscribers: subjectList(func() []SubjectCount {
		return []SubjectCount{{Topic: "r1", Count: 1}, {Topic: "r2", Count: 9}, {Topic: "r1", Count: 5}, {Topic: "r3", Count: 0}, {Topic: "bad topic", Count: 50}, {Topic: "r4", Count: 2}}
	})})
	clk.Advance(time.Second)
	e := sent(t, a, clk.Now())
	if want := []wireTopic{{"b", 3, 0, 0}, {"c", 2, 0, 0}}; !slices.Equal(e.Slice, want) {
		t.Errorf("slice = %v, want %v", e.Slice, want)
	}
	if want := []wireUser{{"u2", 5}, {"u3", 4}}; !slices.Equal(e.Users, want) {
		t.Errorf("users = %v, want %v", e.Users, want)
	}
	if want := []wireSub{{"r2", 9}, {"r1", 6}}; !slices.Equal(e.Subs, want) {
		t.Errorf("subs = %v, want %v", e.Subs, want)
	}
	// The snapshot the envelope was built from is untouched.
	if local.snap.TopTopics[0].Topic != "a" {
		t.Errorf("local snapshot reordered: %v", local.snap.TopTopics)
	}

	// Subjects wired but empty: "subs":[] is still sent.
	b, err := newOffline(t, newFakeLocal(), Options{}, Deps{Subscribers: subjectList(func() []SubjectCount { return nil })}).collect(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"subs":[]`) || !strings.Contains(string(b), `"slice":[]`) || !strings.Contains(string(b), `"users":[]`) {
		t.Errorf("empty lists not sent as []: %s", b)
	}
}

func TestBroadcastFitsMaxEnvelopeBytes(t *testing.T) {
	var topics []pressure.TopicRate
	for i := range 20 {
		topics = append(topics, pressure.TopicRate{Topic: strings.Repeat(string(rune('a'+i)), 200), MessagesPerSec: float64(i + 1)})
	}
	a := newOffline(t, newFakeLocal(topics...), Options{maxEnvelopeBytes: 1500, HMACSecret: []byte("k")}, Deps{})
	b, err := a.collect(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 1500 {
		t.Fatalf("sent %d bytes, over 1500", len(b))
	}
	e, err := decodeEnvelope(string(b), envsign.New([]byte("k")), 1500, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Slice) == 0 || e.Slice[0].MessagesPerSec != 20 {
		t.Errorf("kept %v, want the highest rates first", e.Slice)
	}
}

// Every user the handshake lets in can be a top publisher: a user of the
// longest length a token may name goes into the envelope, and a receiver
// takes it.
func TestLongestUserIsSentAndTaken(t *testing.T) {
	if MaxUserLen != handshake.MaxUserLen {
		t.Fatalf("MaxUserLen %d, the handshake's %d: users between them are missing from the cluster view", MaxUserLen, handshake.MaxUserLen)
	}
	long := strings.Repeat("u", handshake.MaxUserLen)
	clk := testkit.NewClock(testEpoch)
	local := newFakeLocal()
	local.snap.TopUsers = []pressure.UserRate{{User: long, MessagesPerSec: 7}}
	a := newOffline(t, local, Options{}, Deps{now: clk.Now})
	clk.Advance(time.Second)
	e := sent(t, a, clk.Now())
	if want := []wireUser{{long, 7}}; !slices.Equal(e.Users, want) {
		t.Fatalf("users sent = %d entries, want the %d-byte user", len(e.Users), len(long))
	}
	b := newOffline(t, newFakeLocal(), Options{}, Deps{now: clk.Now})
	raw, err := a.collect(clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	b.receive(string(raw))
	if got := b.RateOfUser(long); got != 7 {
		t.Errorf("receiver's rate of the %d-byte user = %v, want 7", len(long), got)
	}
}
