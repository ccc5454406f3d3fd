package message_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/fluidlp"
	"github.com/rtserver/rtserver/pressure"
)

func verdict(d message.Decision) string {
	if d.Allowed {
		return "allowed"
	}
	return "denied " + d.Reason
}

// Classes, rules and routing: resolve the class once per method, check
// every call, release what the check took when the call is done.
func Example() {
	cfg := message.Config{
		Classes: map[string]message.Rule{
			"chat":    {Rate: &message.Rate{Limit: 2, Per: time.Minute, By: "user"}},
			"reports": {Concurrency: &message.Concurrency{Max: 1}},
		},
		Methods: map[string]string{
			"chat.say": "chat",
			"report.*": "reports", // path.Match glob; exact names win
		},
	}
	adm, err := message.New(cfg, message.Deps{})
	if err != nil {
		panic(err)
	}
	router, err := message.NewRouter(adm, cfg.Methods)
	if err != nil {
		panic(err)
	}

	chat := router.ClassOf("chat.say")
	for range 3 {
		call := message.Call{Method: "chat.say", User: "alice"}
		d := chat.Check(&call)
		fmt.Println("chat.say:", verdict(d))
	}

	reports := router.ClassOf("report.monthly")
	var a, b message.Call
	fmt.Println("report a:", reports.Check(&a).Allowed)
	d := reports.Check(&b)
	fmt.Println("report b:", d.Allowed, d.Reason, d.RetryAfterMillis() > 0)
	a.Release() // a's handler returned: its lease goes back, exactly once
	a.Release() // a no-op
	fmt.Println("report b again:", reports.Check(&b).Allowed)
	b.Release()

	fmt.Println("unmapped method has a class:", router.ClassOf("ping") != nil)
	// Output:
	// chat.say: allowed
	// chat.say: allowed
	// chat.say: denied RATE
	// report a: true
	// report b: false CONCURRENCY true
	// report b again: true
	// unmapped method has a class: false
}

// A class that sheds while the instance is under memory or publish-rate
// pressure, read from the pressure monitor's snapshot on every call.
func ExampleRule_reasons() {
	snap := &pressure.Snapshot{Reason: pressure.None}
	adm, err := message.New(message.Config{}, message.Deps{
		Snapshot:   func() *pressure.Snapshot { return snap },
		RetryAfter: 2 * time.Second, // hints are uniform in [1s, 3s)
	})
	if err != nil {
		panic(err)
	}
	reasons, err := message.ParseReasons([]string{"MEMORY", "PUBLISH_RATE"})
	if err != nil {
		panic(err)
	}
	if err := adm.Register("expensive-rpc", message.Rule{Reasons: reasons}); err != nil {
		panic(err)
	}
	cls, _ := adm.Class("expensive-rpc")

	var call message.Call
	fmt.Println(cls.Check(&call).Allowed)
	snap = &pressure.Snapshot{Reason: pressure.Memory}
	d := cls.Check(&call)
	fmt.Println(d.Allowed, d.Reason, d.RetryAfter >= time.Second && d.RetryAfter < 3*time.Second)
	// Output:
	// true
	// false MEMORY true
}

// A predicate: any cheap, non-blocking test of the pressure snapshot and
// the call, given by the name of its class. One that fails is decided by
// Config.FailPolicy.
func ExamplePredicate() {
	cfg := message.Config{
		Classes:    map[string]message.Rule{"admin": {}}, // the predicate is its only part
		FailPolicy: message.FailClosed,
	}
	adm, err := message.New(cfg, message.Deps{Predicates: map[string]message.Predicate{
		"admin": func(_ *pressure.Snapshot, c *message.Call) (bool, error) {
			if c.User == "" {
				return false, fmt.Errorf("anonymous call")
			}
			return c.User == "root", nil
		},
	}})
	if err != nil {
		panic(err)
	}
	cls, _ := adm.Class("admin")
	for _, user := range []string{"root", "alice", ""} {
		call := message.Call{Method: "admin.kick", User: user}
		d := cls.Check(&call)
		fmt.Printf("%q: %s\n", user, verdict(d))
	}
	// Output:
	// "root": allowed
	// "alice": denied PREDICATE
	// "": denied PREDICATE
}

// Combine joins the decisions of several parts: allowed only if all are,
// the longest wait, and the binding part's reason.
func ExampleCombine() {
	rate := message.Decision{Allowed: false, Limit: 20, Remaining: 0, RetryAfter: 300 * time.Millisecond, Reason: message.ReasonRate}
	busy := message.Decision{Allowed: false, Limit: 8, Remaining: 0, RetryAfter: time.Second, Reason: message.ReasonConcurrency}
	d := message.Combine(message.Combine(message.AllowFull, rate), busy)
	fmt.Println(d.Allowed, d.Reason, d.RetryAfter, d.Limit)
	// Output:
	// false CONCURRENCY 1s 8
}

// Value-aware admission: the class prices its calls with the duals of the
// workload's fluid LP (solved once at Register). Small calls (100 units,
// worth 1) clear the price of 0.01 a unit; large ones (10,000 units, worth
// 50) do not, and are denied POLICY without spending any of the budget,
// which stays for the small calls.
func ExampleBidPrice() {
	adm, err := message.New(message.Config{}, message.Deps{})
	if err != nil {
		panic(err)
	}
	if err := adm.Register("llm", message.Rule{
		Cost: &message.Cost{Budget: 50_000, Per: time.Minute, Of: "param:maxTokens"},
		BidPrice: &message.BidPrice{
			ValueOf: "param:value",
			Workload: &fluidlp.Workload{
				Types: []fluidlp.Type{
					{Cost: 100, Value: 1, Weight: 0.5},     // small completions
					{Cost: 10_000, Value: 50, Weight: 0.5}, // large completions
				},
				Arrivals:   1000, // calls a minute
				RateBudget: 1000,
				CostBudget: 50_000,
			},
			// or the prices directly: Duals: &message.Duals{Rate: 0, Cost: 0.01},
		},
	}); err != nil {
		panic(err)
	}
	llm, _ := adm.Class("llm")
	duals, _ := llm.BidPrice()
	fmt.Printf("p_rate=%g p_cost=%g\n", duals.Rate, duals.Cost)
	small := message.Call{User: "alice", Params: []byte(`{"maxTokens":100,"value":1}`)}
	large := message.Call{User: "alice", Params: []byte(`{"maxTokens":10000,"value":50}`)}
	fmt.Println("small:", verdict(llm.Check(&small)))
	fmt.Println("large:", verdict(llm.Check(&large)))
	// Output:
	// p_rate=0 p_cost=0.01
	// small: allowed
	// large: denied POLICY
}

// fleet is a message.CeilingStore in memory for the example: two other
// instances have inferred limits of 30 and 90. (clusterrate.NewCeilings
// keeps them in Redis.)
type fleet struct{}

func (fleet) ShareLimit(_ context.Context, _ string, own int64) ([]int64, error) {
	return []int64{30, 90, own}, nil
}

// A fleet-wide adaptive concurrency ceiling: every instance applies the
// median of the live instances' limits divided by their count.
func ExampleAdmission_ShareCeilings() {
	adm, err := message.New(message.Config{}, message.Deps{Ceilings: fleet{}})
	if err != nil {
		panic(err)
	}
	if err := adm.Register("backend", message.Rule{
		AdaptiveConcurrency: &message.AdaptiveConcurrency{Min: 60, Max: 256, Scope: "cluster"},
	}); err != nil {
		panic(err)
	}
	backend, _ := adm.Class("backend")
	var call message.Call
	for range 25 { // the first no-load probe: 25 calls at Min
		backend.Check(&call)
		call.Release()
	}
	fmt.Println("own limit:", backend.ConcurrencyLimit())
	adm.ShareCeilings(context.Background(), time.Second) // a started Admission does this every second
	fmt.Println("fleet share:", backend.ConcurrencyLimit())
	// Output:
	// own limit: 60
	// fleet share: 20
}
