package fluidlp

import (
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// calibration is the unified-admission calibration workload: small cheap
// calls worth 1 and large ones worth 50 at a hundred times the cost, half
// of each, 1,000 calls a period against budgets of 1,000 calls and 50,000
// units.
var calibration = Workload{
	Types:      []Type{{Cost: 100, Value: 1, Weight: 0.5}, {Cost: 10_000, Value: 50, Weight: 0.5}},
	Arrivals:   1000,
	RateBudget: 1000,
	CostBudget: 50_000,
}

func TestCalibration(t *testing.T) {
	s, err := Solve(calibration)
	if err != nil {
		t.Fatal(err)
	}
	// The small calls are worth 0.01 per unit, the large 0.005: the cost
	// budget goes to the 500 small ones, and the price of a unit is the
	// small calls' value per unit (the highest optimal dual: the large
	// calls are priced out, 50 < 100).
	if s.RateDual != 0 || math.Abs(s.CostDual-0.01) > 1e-12 || s.Objective != 500 || s.Admit[0] != 1 || s.Admit[1] != 0 {
		t.Fatalf("%+v", s)
	}
	if p := s.Price(10_000); p <= 50 {
		t.Fatalf("a large call's price %v does not exceed its value 50", p)
	}
}

func TestInvalid(t *testing.T) {
	for _, w := range []Workload{
		{},
		{Types: []Type{{Cost: -1, Value: 1, Weight: 1}}, CostBudget: 1},
		{Types: []Type{{Cost: 1, Value: math.NaN(), Weight: 1}}, CostBudget: 1},
		{Types: []Type{{Cost: 1, Value: 1, Weight: 0}}, CostBudget: 1},
		{Types: []Type{{Cost: 1, Value: 1, Weight: 1}}, CostBudget: math.Inf(1)},
	} {
		if _, err := Solve(w); err == nil {
			t.Errorf("%+v: no error", w)
		}
	}
}

// TestOptimal: on random workloads the solution is feasible, no feasible
// plan does better (random plans, scaled into the budgets), its duals
// satisfy complementary slackness (a type admitted at all clears its
// price; a type not fully admitted does not beat it), and a budget with a
// positive price is used up.
func TestOptimal(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(1, 6).Draw(rt, "types")
		w := Workload{
			RateBudget: float64(rapid.IntRange(0, 2000).Draw(rt, "rate")),
			CostBudget: float64(rapid.IntRange(0, 100_000).Draw(rt, "cost")),
		}
		for i := range k {
			w.Types = append(w.Types, Type{
				Cost:   float64(rapid.IntRange(0, 10_000).Draw(rt, fmt.Sprint("c", i))),
				Value:  float64(rapid.IntRange(0, 100).Draw(rt, fmt.Sprint("v", i))),
				Weight: float64(rapid.IntRange(1, 1000).Draw(rt, fmt.Sprint("w", i))),
			})
		}
		s, err := Solve(w)
		if err != nil {
			rt.Fatal(err)
		}
		n, _ := counts(w)
		used := func(x []float64) (calls, cost, value float64) {
			for i, t := range w.Types {
				calls += n[i] * x[i]
				cost += n[i] * t.Cost * x[i]
				value += n[i] * t.Value * x[i]
			}
			return
		}
		tol := 1e-6
		calls, cost, value := used(s.Admit)
		if (w.RateBudget > 0 && calls > w.RateBudget*(1+tol)+tol) || (w.CostBudget > 0 && cost > w.CostBudget*(1+tol)+tol) {
			rt.Fatalf("infeasible: %+v uses %v calls, %v cost", s, calls, cost)
		}
		if math.Abs(value-s.Objective) > tol*max(1, value) {
			rt.Fatalf("objective %v, plan's value %v", s.Objective, value)
		}
		for i, t := range w.Types {
			margin := t.Value - s.Price(t.Cost)
			if s.Admit[i] > tol && margin < -tol*max(1, t.Value) {
				rt.Fatalf("type %d admitted %v at a loss: %+v", i, s.Admit[i], s)
			}
			if s.Admit[i] < 1-tol && margin > tol*max(1, t.Value) {
				rt.Fatalf("type %d admitted only %v with a surplus: %+v", i, s.Admit[i], s)
			}
		}
		if s.RateDual > tol && math.Abs(calls-w.RateBudget) > tol*max(1, w.RateBudget) {
			rt.Fatalf("rate priced %v but not used up (%v of %v)", s.RateDual, calls, w.RateBudget)
		}
		if s.CostDual > tol && math.Abs(cost-w.CostBudget) > tol*max(1, w.CostBudget) {
			rt.Fatalf("cost priced %v but not used up (%v of %v)", s.CostDual, cost, w.CostBudget)
		}
		for j := range 20 {
			x := make([]float64, k)
			for i := range x {
				x[i] = rapid.Float64Range(0, 1).Draw(rt, fmt.Sprint("x", j, i))
			}
			c, co, v := used(x)
			f := 1.0
			if w.RateBudget > 0 && c > w.RateBudget {
				f = min(f, w.RateBudget/c)
			}
			if w.CostBudget > 0 && co > w.CostBudget {
				f = min(f, w.CostBudget/co)
			}
			if v*f > s.Objective*(1+tol)+tol {
				rt.Fatalf("plan %v (scaled %v) is worth %v > optimum %v", x, f, v*f, s.Objective)
			}
		}
	})
}

func ExampleSolve() {
	s, err := Solve(Workload{
		Types: []Type{
			{Cost: 100, Value: 1, Weight: 0.5},     // small completions
			{Cost: 10_000, Value: 50, Weight: 0.5}, // large completions
		},
		Arrivals:   1000,
		RateBudget: 1000,
		CostBudget: 50_000,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("p_rate=%g p_cost=%g admit=%v objective=%g\n", s.RateDual, s.CostDual, s.Admit, s.Objective)
	// Output: p_rate=0 p_cost=0.01 admit=[1 0] objective=500
}
