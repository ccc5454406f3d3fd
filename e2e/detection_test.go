package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// detectionConfig is every default of the cluster view (pressure.*,
// publishRate.*) and one clusterTopPublisher rule by user at 100/s.
const detectionConfig = `auth: {jwt: {hmacSecret: %q}}
admission:
  classes: {fair: {clusterTopPublisher: {threshold: 100, by: user}}}
  methods: {publish: fair}
%s`

// A user publishing at 150/s against a clusterTopPublisher threshold of
// 100, with the defaults, is shed by every instance it publishes to and,
// once it slows to 50/s, admitted again by all of them; a quiet user
// beside it is never shed. On one instance without Redis, one on Redis,
// and spread evenly over three on Redis. How long both take is logged
// (docs/admission.md states it; a budget belongs to benchmarks, not to a
// test): go test ./e2e -run TestDetectionAndReadmission -v.
func TestDetectionAndReadmission(t *testing.T) {
	for _, tc := range []struct {
		name      string
		instances int
		redis     bool
	}{{"one instance", 1, false}, {"one instance on Redis", 1, true}, {"three instances on Redis", 3, true}} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			extra := ""
			if tc.redis {
				extra = fmt.Sprintf("redis: {url: %q}\n", redistest.Start(t).URL())
			}
			cfg := fmt.Sprintf(detectionConfig, grantSecret, extra)
			var procs []*proc
			for range tc.instances {
				procs = append(procs, start(t, cfg))
			}
			for _, p := range procs {
				// Every instance in every view: the fleet is whole.
				p.waitMetric("cluster_publish_rate_instances", 20*time.Second, func(v float64) bool { return v == float64(tc.instances-1) })
			}
			abuser, quiet := grantToken(t, "abuser", nil), grantToken(t, "quiet", nil)
			var conns, calm []*wstest.Conn
			for _, p := range procs {
				conns = append(conns, dialAs(t, p, abuser))
				calm = append(calm, dialAs(t, p, quiet))
			}
			detect, sent := pace(t, conns, 150, true, 0)
			for i, c := range calm {
				if f := c.Call("publish", `{"topic":"calm","data":1}`); f.Error != nil {
					t.Fatalf("instance %d shed the quiet user while shedding the abuser: %+v", i, f.Error)
				}
			}
			// A second and a half more at 150/s: the abuser's whole last
			// second is over the threshold when it slows down.
			_, steady := pace(t, conns, 150, true, 1500*time.Millisecond)
			readmit, _ := pace(t, conns, 50, false, 0)
			t.Logf("%s: the abuser (150/s) shed by every instance after %v (the first after %v, %d calls), then %d calls at 150/s; slowed to 50/s, admitted again by every instance after %v (the first after %v)",
				tc.name, detect[len(detect)-1].Round(time.Millisecond), detect[0].Round(time.Millisecond), sent, steady,
				readmit[len(readmit)-1].Round(time.Millisecond), readmit[0].Round(time.Millisecond))
		})
	}
}

// pace publishes through conns in turn, perSec calls a second in all,
// until every connection has been shed with CLUSTER_TOP_PUBLISHER (shed)
// or admitted (!shed), and returns when each first was, from the first
// call, in ascending order, and how many calls it made. With hold > 0 it
// publishes for that long instead.
func pace(t *testing.T, conns []*wstest.Conn, perSec int, shed bool, hold time.Duration) ([]time.Duration, int) {
	t.Helper()
	first := make([]time.Duration, len(conns))
	done := 0
	tick := time.NewTicker(time.Second / time.Duration(perSec))
	defer tick.Stop()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	n := 0
	for ; (hold == 0 && done < len(conns)) || (hold > 0 && time.Since(start) < hold); n++ {
		if hold == 0 && time.Now().After(deadline) {
			t.Fatalf("after 30 s and %d calls at %d/s, %d of %d instances had %s", n, perSec, done, len(conns), map[bool]string{true: "shed the abuser", false: "admitted it again"}[shed])
		}
		<-tick.C
		i := n % len(conns)
		f := conns[i].Call("publish", `{"topic":"room","data":1}`)
		isShed := f.Error != nil
		if isShed {
			var d protocol.OverloadedData
			if f.Error.Code != protocol.CodeOverloaded || json.Unmarshal(f.Error.Data, &d) != nil || d.Reason != "CLUSTER_TOP_PUBLISHER" {
				t.Fatalf("instance %d answered %+v", i, f.Error)
			}
		}
		if isShed == shed && first[i] == 0 {
			first[i] = time.Since(start)
			done++
		}
	}
	slices.Sort(first)
	return first, n
}

// An anonymous publisher is keyed by its client IP under a rule by user,
// for the rates the rule reads as for its budgets: one hammering at
// 150/s against a threshold of 100 is shed, and admitted again once it
// slows down.
func TestAnonymousTopPublisherIsShedByIP(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `admission:
  classes: {fair: {clusterTopPublisher: {threshold: 100, by: user}}}
  methods: {publish: fair}
`)
	c := wstest.Dial(t, p.WS())
	detect, sent := pace(t, []*wstest.Conn{c}, 150, true, 0)
	_, _ = pace(t, []*wstest.Conn{c}, 150, true, 1500*time.Millisecond)
	readmit, _ := pace(t, []*wstest.Conn{c}, 50, false, 0)
	t.Logf("anonymous at 150/s shed after %v (%d calls); at 50/s admitted again after %v", detect[0].Round(time.Millisecond), sent, readmit[0].Round(time.Millisecond))
}
