package publishrate

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// liveMonitor is a pressure monitor that never samples by itself; the
// tests run it in a testing/synctest bubble, on the bubble's clock.
func liveMonitor(t *testing.T) *pressure.Monitor {
	t.Helper()
	mon, err := pressure.New(pressure.Config{SampleInterval: time.Hour}, pressure.Deps{Logger: discardLog})
	if err != nil {
		t.Fatal(err)
	}
	return mon
}

// publish records n attempts by user on topic, evenly over d.
func publish(mon *pressure.Monitor, topic, user string, n int, d time.Duration) {
	for range n {
		mon.RecordAttempt(topic, user, 10)
		time.Sleep(d / time.Duration(n))
	}
}

// Broadcast mode: this instance's share is its live rate, current between
// samples, added to the siblings' slices; and its envelope carries the
// live rates at sending, not averages over the interval.
func TestLiveOwnShareInBroadcastMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mon := liveMonitor(t)
		a := newOffline(t, mon, Options{}, Deps{now: time.Now, InstanceID: "me"})
		a.receive(string(envUsers(t, "B", 1, wireUser{"spread", 60})))

		publish(mon, "room", "spread", 30, 300*time.Millisecond)
		mon.Sample() // 30 in 0.3 s: the sample says 100/s, which the live rate replaces
		publish(mon, "room", "spread", 20, 200*time.Millisecond)
		if got := a.RateOfUser("spread"); got != 110 {
			t.Fatalf("RateOfUser = %v, want B's 60 + the live 50", got)
		}
		if got := a.RateOf("room"); got != 50 {
			t.Fatalf("RateOf = %v, want the live 50", got)
		}
		e := sent(t, a, time.Now())
		if len(e.Users) != 1 || e.Users[0] != (wireUser{"spread", 50}) {
			t.Fatalf("envelope users = %v, want spread at the live 50", e.Users)
		}
		// A second later, with no attempt since, the own share is gone.
		time.Sleep(time.Second)
		if got := a.RateOfUser("spread"); got != 60 {
			t.Fatalf("a second after the last attempt RateOfUser = %v, want B's 60", got)
		}
	})
}

// Merged mode: the view holds this instance's share as its last envelope
// said; what the live rate has grown since is added, and a user the view
// does not carry keeps its own live rate.
func TestLiveOwnShareInMergedMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mon := liveMonitor(t)
		a := newOffline(t, mon, Options{Mode: ModeMerged}, Deps{now: time.Now, InstanceID: "me"})
		publish(mon, "room", "spread", 30, 500*time.Millisecond)
		if e := sent(t, a, time.Now()); len(e.Users) != 1 || e.Users[0] != (wireUser{"spread", 30}) {
			t.Fatalf("envelope users = %v", e.Users)
		}
		b, err := marshalEnvelope(&envelope{V: viewVersion, InstanceID: "M", TS: time.Now().UnixMilli(), Epoch: 1, Instances: 3,
			Slice: []wireTopic{}, Users: []wireUser{{"spread", 90}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a.receiveView(string(b))
		if got := a.RateOfUser("spread"); got != 90 {
			t.Fatalf("RateOfUser = %v, want the view's 90", got)
		}
		publish(mon, "room", "spread", 20, 200*time.Millisecond)
		if got := a.RateOfUser("spread"); got != 110 {
			t.Fatalf("RateOfUser = %v, want the view's 90 + the 20 grown since", got)
		}
		publish(mon, "other", "mine", 40, 100*time.Millisecond)
		if got := a.RateOfUser("mine"); got != 40 {
			t.Fatalf("a user outside the view: RateOfUser = %v, want the own 40", got)
		}
	})
}

// envUsers marshals an unsigned envelope from id with users only.
func envUsers(t *testing.T, id string, ts int64, users ...wireUser) []byte {
	t.Helper()
	b, err := marshalEnvelope(&envelope{V: 1, InstanceID: id, TS: time.Now().UnixMilli() + ts, Slice: []wireTopic{}, Users: users}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
