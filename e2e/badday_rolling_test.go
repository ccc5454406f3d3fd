package e2e

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// envCount is the number in the environment variable name (def when it
// is unset), which must be at least least: how a long variant sizes a
// test.
func envCount(t *testing.T, name string, def, least int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a number of at least %d", name, v, least)
	}
	return n
}

// TestBadDayRollingRestart restarts the three instances of a fleet one
// after the other (SIGTERM, then a new process on the same address) while
// clients spread over them stay subscribed to a history topic that a
// publisher on another instance keeps publishing to. Each restarted
// instance's clients reconnect and recover: every acknowledged publish
// reaches every client or its loss is reported (OnRecovery false), and
// the instances not restarting never turn not-ready (Redis is fine
// throughout). The recoveries, the times to stop and to be ready again
// are logged, not asserted.
func TestBadDayRollingRestart(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := fleetConfig(r.URL(), historyConfig(10000, "5m", "drain: {duration: 1s}\nhandshake: {maxConnections: 20000}\n"))
	fleet := []*proc{start(t, cfg), start(t, cfg), start(t, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A few dozen clients in the suite; BADDAY_CLIENTS=3000 is the long
	// variant (scripts/bad-days.sh rolling).
	k := envCount(t, "BADDAY_CLIENTS", 30, 3)
	subs := make([]*badSub, k)
	for i := range subs {
		subs[i] = subscribeBad(ctx, t, fleet[i%3], "room:roll", "")
	}

	var acked []string
	n := 0
	publishOn := func(p *proc, count int) {
		pub := wstest.Dial(t, p.WS())
		defer pub.WS.CloseNow()
		for range count {
			n++
			d := strconv.Itoa(n)
			if f := pub.Call("publish", `{"topic":"room:roll","data":`+d+`}`); f.Error == nil {
				acked = append(acked, d)
			}
		}
	}
	var stops, readies []time.Duration
	flips := 0
	for i := range fleet {
		other := fleet[(i+1)%3]
		var watch []*readiness
		for j, p := range fleet {
			if j != i {
				watch = append(watch, watchReady(p))
			}
		}
		publishOn(other, 20)
		began := time.Now()
		fleet[i].signal(syscall.SIGTERM)
		if code := fleet[i].exitCode(60 * time.Second); code != 0 {
			t.Errorf("instance %d: exit code %d after SIGTERM", i, code)
		}
		stops = append(stops, time.Since(began))
		publishOn(other, 20) // missed by the restarted instance's clients
		began = time.Now()
		fleet[i] = startAt(t, fleet[i].Addr, cfg)
		fleet[i].waitReady()
		readies = append(readies, time.Since(began))
		for _, w := range watch {
			w.close()
			flips += w.unready(0)
		}
	}
	publishOn(fleet[0], 20)
	if flips != 0 {
		t.Errorf("/readyz of an instance not restarting went not-ready %d times", flips)
	}
	var missing, reported, recovered int
	for i, s := range subs {
		m, rep := s.check(t, acked)
		if m > 0 && rep == 0 {
			t.Errorf("client %d: %d acknowledged publishes never delivered, and no loss reported", i, m)
		}
		s.mu.Lock()
		recovered += s.recovers
		s.mu.Unlock()
		missing, reported = missing+m, reported+rep
	}
	testkit.Eventually(t, 30*time.Second, "every instance ready at the end", func() bool {
		for _, p := range fleet {
			if p.status("/readyz") != 200 {
				return false
			}
		}
		return true
	})
	t.Logf("rolling restart of 3 instances, %d clients: %d publishes, %d acknowledged; %d deliveries missing (losses reported: %d); %d recoveries; stops after SIGTERM %v; ready again after %v; /readyz flips of the other instances: %d",
		k, n, len(acked), missing, reported, recovered, stops, readies, flips)
}
