// Package fluidlp solves the fluid linear program behind bid-price
// admission (revenue management's static bid prices), for a message class
// with a call budget and a cost budget per period.
//
// A workload is a mix of call types, each with a cost (units of the cost
// budget), a value (what admitting it is worth) and a weight (how many such
// calls arrive per period, or their share of Arrivals). The fluid LP
// admits a fraction x_i of each type:
//
//	maximise   Σ n_i·v_i·x_i
//	subject to Σ n_i·x_i     ≤ RateBudget   (dual p_rate)
//	           Σ n_i·c_i·x_i ≤ CostBudget   (dual p_cost)
//	           0 ≤ x_i ≤ 1
//
// Its duals are the shadow prices of the two budgets: a call is worth
// admitting iff v ≥ p_rate + p_cost·c. The message tier's BidPrice part
// applies that test per call with the duals Solve returns (or duals given
// directly); Solve is exported for offline use too.
//
// The primal is solved by a small dense simplex (a handful of types); the
// duals by minimising the dual function over the vertices of its
// piecewise-linear pieces. When several duals are optimal (a budget that
// the admitted types fill exactly), Solve returns the highest: every type
// an optimal admission plan admits in part still clears it, and the types
// it leaves out are priced out (at the lowest duals they would tie).
//
// Must never: return duals that are not optimal (Solve checks strong
// duality, objective = dual value, before returning), or loop without end
// (Bland's rule).
package fluidlp
