package clusterrate

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/ratelimit"
)

var t0 = time.Unix(1_760_000_000, 0)

// clock is an injected message.Deps clock.
func newClock() *testkit.Clock { return testkit.NewClock(t0) }

func register(t interface{ Fatal(...any) }, a *message.Admission, name string, r message.Rule) *message.Class {
	if err := a.Register(name, r); err != nil {
		t.Fatal(err)
	}
	c, _ := a.Class(name)
	return c
}

func client(t testing.TB, s *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLocalAndClusterAgree: the seed's conformance idea. For random
// timelines of calls from a few users, a local rate part and a
// cluster-scoped one (real redis-server) give the same stream of
// decisions: allowed or not, remaining, and the exact wait.
func TestLocalAndClusterAgree(t *testing.T) {
	s := redistest.Start(t)
	rc := client(t, s)
	round, denied := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		round++
		limit := rapid.IntRange(1, 5).Draw(rt, "limit")
		// Any period, to the nanosecond: the emission interval need not
		// be a whole number of anything.
		per := time.Duration(rapid.Int64Range(1, int64(100*time.Millisecond)).Draw(rt, "per"))
		clk := newClock()
		local := testkit.Must(message.New(message.Config{}, withClock(message.Deps{}, clk.Now)))
		// A generous timeout, and any error fails the test: a check that
		// timed out on a loaded machine would be decided open, not compared.
		l := mustLimiter(Config{Prefix: fmt.Sprintf("conf%d:", round)}, Deps{Client: rc, timeout: 10 * time.Second})
		shared := testkit.Must(message.New(message.Config{}, withClock(message.Deps{Shared: failOnError{t, l}}, clk.Now)))
		lc := register(rt, local, "c", message.Rule{Rate: &message.Rate{Limit: limit, Per: per}})
		sc := register(rt, shared, "c", message.Rule{Rate: &message.Rate{Limit: limit, Per: per, Scope: "cluster"}})
		users := []string{"ann", "bob"}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := range steps {
			clk.Advance(time.Duration(rapid.Int64Range(0, int64(per)/int64(limit)*2).Draw(rt, fmt.Sprintf("gap%d", i))))
			u := rapid.SampledFrom(users).Draw(rt, fmt.Sprintf("user%d", i))
			dl := lc.Check(&message.Call{User: u})
			ds := sc.Check(&message.Call{User: u})
			if dl != ds {
				rt.Fatalf("step %d (user %s): local %+v, cluster %+v", i, u, dl, ds)
			}
			if !dl.Allowed {
				denied++
			}
		}
	})
	if denied == 0 {
		t.Fatal("no timeline reached a denial: the comparison proved nothing")
	}
}

// TestLimiterMatchesKeyed: the property under the class, without the
// class's 1ms floor on hints: for random limits (up to 10 million units a
// period, so rates far above 1M/s), periods to the nanosecond, weights
// and timelines, the script and ratelimit.Keyed return identical
// results (allowed, remaining, and the wait to the nanosecond).
func TestLimiterMatchesKeyed(t *testing.T) {
	s := redistest.Start(t)
	l := mustLimiter(Config{}, Deps{Client: client(t, s), timeout: 10 * time.Second})
	round, denied, allowed := 0, 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		round++
		limit := rapid.Int64Range(1, 10_000_000).Draw(rt, "limit")
		per := time.Duration(rapid.Int64Range(1, int64(10*time.Second)).Draw(rt, "per"))
		keyed := ratelimit.NewKeyed(int(limit), per, 0)
		tInt := ratelimit.EmissionInterval(limit, per)
		now := t0.Add(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "start")))
		key := fmt.Sprintf("k%d", round)
		res := make([]ratelimit.Result, 1)
		for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			now = now.Add(time.Duration(rapid.Int64Range(0, 3*tInt*limit/2).Draw(rt, fmt.Sprintf("gap%d", i))))
			n := rapid.Int64Range(0, limit+1).Draw(rt, fmt.Sprintf("n%d", i))
			want := keyed.AllowN(key, n, now)
			if err := l.AllowShared(context.Background(), key, now, []message.SharedLimit{{Name: "cost", Limit: limit, Per: per, N: n}}, res); err != nil {
				rt.Fatal(err)
			}
			if res[0] != want {
				rt.Fatalf("step %d (n=%d, limit %d per %v): local %+v, cluster %+v", i, n, limit, per, want, res[0])
			}
			if want.Allowed {
				allowed++
			} else {
				denied++
			}
		}
	})
	if denied == 0 || allowed == 0 {
		t.Fatalf("%d allowed, %d denied: the timelines did not reach both", allowed, denied)
	}
}

// TestRefillRateIsExact: at 90,000 units/s and at rates past a million a
// second, a drained bucket gives back one unit per emission interval
// rounded up to the nanosecond, as the local limiter does (not to the
// microsecond: 90,000/s used to refill at 83,333/s, and rates above 1M/s
// capped at 1M/s).
func TestRefillRateIsExact(t *testing.T) {
	s := redistest.Start(t)
	l := mustLimiter(Config{}, Deps{Client: client(t, s), timeout: 10 * time.Second})
	for _, limit := range []int64{90_000, 999_999, 1_000_000, 3_000_000, 50_000_000} {
		lim := []message.SharedLimit{{Name: "rate", Limit: limit, Per: time.Second, N: limit}}
		res := make([]ratelimit.Result, 1)
		key := fmt.Sprintf("refill%d", limit)
		if err := l.AllowShared(context.Background(), key, t0, lim, res); err != nil || !res[0].Allowed {
			t.Fatalf("%d/s: draining the burst: %+v, %v", limit, res[0], err)
		}
		// One second later, exactly the units the local limiter refills.
		want := time.Second.Nanoseconds() / ratelimit.EmissionInterval(limit, time.Second)
		lim[0].N = want
		if err := l.AllowShared(context.Background(), key, t0.Add(time.Second), lim, res); err != nil || !res[0].Allowed {
			t.Fatalf("%d/s: %d units a second later: %+v, %v", limit, want, res[0], err)
		}
		lim[0].N = 1
		if err := l.AllowShared(context.Background(), key, t0.Add(time.Second), lim, res); err != nil || res[0].Allowed {
			t.Fatalf("%d/s: one unit more: %+v, %v", limit, res[0], err)
		}
		// Rounding the interval up to a nanosecond costs at most one
		// nanosecond per unit: 90,000/s refills 89,992 a second (was
		// 83,333 with whole microseconds), 1M/s exactly 1M, 3M/s 2.99M.
		if lost := limit - want; lost > limit*limit/int64(time.Second)+1 {
			t.Fatalf("%d/s refills %d/s", limit, want)
		}
	}
}

// TestReadsEarlierFormat: a key written by the earlier script (a plain
// number of microseconds) is read as that time, so a fleet mid-upgrade
// keeps its budget.
func TestReadsEarlierFormat(t *testing.T) {
	s := redistest.Start(t)
	rc := client(t, s)
	l := mustLimiter(Config{}, Deps{Client: rc})
	// The key's TAT is half a second ahead of now: 5 of 10 units used.
	tat := t0.Add(500 * time.Millisecond).UnixMicro()
	if err := rc.Set(context.Background(), "{rt:adm:old}:rate", fmt.Sprint(tat), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	res := make([]ratelimit.Result, 1)
	lim := []message.SharedLimit{{Name: "rate", Limit: 10, Per: time.Second, N: 1}}
	if err := l.AllowShared(context.Background(), "old", t0, lim, res); err != nil || !res[0].Allowed || res[0].Remaining != 4 {
		t.Fatalf("%+v, %v: want allowed with 4 left", res[0], err)
	}
	v, err := rc.Get(context.Background(), "{rt:adm:old}:rate").Result()
	if err != nil || v != fmt.Sprintf("%d.000", t0.Add(600*time.Millisecond).UnixMicro()) {
		t.Fatalf("stored %q, %v", v, err)
	}
}

// TestClusterLimitHoldsAcrossInstances: two instances (two Admissions on
// one Redis) share one budget: together they admit exactly one instance's
// limit.
func TestClusterLimitHoldsAcrossInstances(t *testing.T) {
	s := redistest.Start(t)
	clk := newClock()
	var classes []*message.Class
	for range 2 {
		a := testkit.Must(message.New(message.Config{}, withClock(message.Deps{Shared: mustLimiter(Config{}, Deps{Client: client(t, s)})}, clk.Now)))
		classes = append(classes, register(t, a, "global", message.Rule{Rate: &message.Rate{Limit: 50, Per: time.Second, Scope: "cluster"}}))
	}
	admitted := 0
	for i := range 200 {
		if classes[i%2].Check(&message.Call{User: "u"}).Allowed {
			admitted++
		}
	}
	if admitted != 50 {
		t.Fatalf("two instances admitted %d, want one instance's limit 50", admitted)
	}
	// A second later the budget is back, for both.
	clk.Advance(time.Second)
	if !classes[0].Check(&message.Call{User: "u"}).Allowed || !classes[1].Check(&message.Call{User: "u"}).Allowed {
		t.Fatal("the budget did not refill")
	}
}

// TestFusedRateAndCostChargeAllOrNothing: a cost denial leaves the rate
// budget untouched, and one check is one command on the wire.
func TestFusedRateAndCostChargeAllOrNothing(t *testing.T) {
	s := redistest.Start(t)
	rc := client(t, s)
	var cmds atomic.Int64
	rc.AddHook(countHook{&cmds})
	clk := newClock()
	a := testkit.Must(message.New(message.Config{}, withClock(message.Deps{Shared: mustLimiter(Config{}, Deps{Client: rc})}, clk.Now)))
	c := register(t, a, "llm", message.Rule{
		Rate: &message.Rate{Limit: 2, Per: time.Minute, Scope: "cluster"},
		Cost: &message.Cost{Budget: 100, Per: time.Minute, Of: "bytes", Scope: "cluster"},
	})
	if d := c.Check(&message.Call{User: "u", Bytes: 60}); !d.Allowed || d.Limit != 2 || d.Remaining != 1 {
		t.Fatalf("first: %+v", d)
	}
	if d := c.Check(&message.Call{User: "u", Bytes: 60}); d.Allowed || d.Reason != message.ReasonCost {
		t.Fatalf("over the cost budget: %+v, want COST", d)
	}
	if d := c.Check(&message.Call{User: "u", Bytes: 40}); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the denied call must not have spent a rate token: %+v", d)
	}
	d := c.Check(&message.Call{User: "u", Bytes: 1})
	if d.Allowed || d.Reason != message.ReasonRate || d.RetryAfter != 30*time.Second {
		t.Fatalf("third admitted call: %+v, want RATE with a 30s wait", d)
	}
	cmds.Store(0)
	for range 10 {
		c.Check(&message.Call{User: "v", Bytes: 1})
	}
	if n := cmds.Load(); n != 10 {
		t.Fatalf("10 checks sent %d commands, want one round trip each", n)
	}
	if ttl, err := rc.PTTL(context.Background(), "{rt:adm:llm:user:v}:rate").Result(); err != nil || ttl <= 0 || ttl > time.Minute+2*time.Second {
		t.Fatalf("rate key PTTL %v, %v: want it to expire when the bucket is full again", ttl, err)
	}
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOnRedisCluster: the fused script works on a real 3-node Redis
// Cluster (its keys share a hash tag, so one slot), for many callers
// spread over every node.
func TestOnRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { rc.Close() })
	l := mustLimiter(Config{}, Deps{Client: rc, timeout: 5 * time.Second})
	limits := []message.SharedLimit{{Name: "rate", Limit: 3, Per: time.Minute, N: 1}, {Name: "cost", Limit: 1000, Per: time.Minute, N: 10}}
	res := make([]ratelimit.Result, 2)
	// The cost left after each call; the 4th is denied by its rate, so its
	// cost result says what it would leave, were it charged (it is not).
	wantCostLeft := []int64{990, 980, 970, 960}
	for u := range 30 {
		key := fmt.Sprintf("g:user:user-%d", u)
		for i := range 4 {
			if err := l.AllowShared(context.Background(), key, t0, limits, res); err != nil {
				t.Fatalf("%s call %d: %v", key, i, err)
			}
			if res[0].Allowed != (i < 3) || res[1].Remaining != wantCostLeft[i] {
				t.Fatalf("%s call %d: %+v", key, i, res)
			}
		}
	}
}

// TestRedisDownIsAnError: a failing Redis is reported, not decided here.
func TestRedisDownIsAnError(t *testing.T) {
	s := redistest.Start(t)
	l := mustLimiter(Config{}, Deps{Client: client(t, s), timeout: 200 * time.Millisecond})
	s.Stop()
	res := make([]ratelimit.Result, 1)
	err := l.AllowShared(context.Background(), "c:user:u", t0, []message.SharedLimit{{Name: "rate", Limit: 1, Per: time.Second, N: 1}}, res)
	if err == nil {
		t.Fatal("no error with Redis down")
	}
}

// BenchmarkClusterCheck is one cluster-scoped check against a local
// redis-server; it reports the p99 latency too.
func BenchmarkClusterCheck(b *testing.B) {
	s := redistest.Start(b)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rc.Close()
	a := testkit.Must(message.New(message.Config{}, message.Deps{Shared: mustLimiter(Config{}, Deps{Client: rc})}))
	c := register(b, a, "g", message.Rule{Rate: &message.Rate{Limit: 1_000_000_000, Per: time.Second, Scope: "cluster"}})
	call := &message.Call{User: "u"}
	c.Check(call) // load the script
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if !c.Check(call).Allowed {
			b.Fatal("denied")
		}
		lat = append(lat, time.Since(start))
	}
	reportP99(b, lat)
}
