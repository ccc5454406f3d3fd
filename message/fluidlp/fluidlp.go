package fluidlp

import (
	"errors"
	"fmt"
	"math"
)

// Type is one kind of call in a workload.
type Type struct {
	Cost   float64 `yaml:"cost" json:"cost"`     // units of the cost budget one call spends (>= 0)
	Value  float64 `yaml:"value" json:"value"`   // what admitting one call is worth (>= 0)
	Weight float64 `yaml:"weight" json:"weight"` // calls per period, or a share of Arrivals (>= 0)
}

// Workload is the model the LP is solved for: the call types and the
// budgets of one period.
type Workload struct {
	Types []Type `yaml:"types" help:"the call types: a list of {cost, value, weight}; weight is calls per period, or a share of arrivals"`
	// Arrivals is how many calls arrive per period; the weights are then
	// shares of it (normalised). 0: each weight is already a count of
	// calls per period.
	Arrivals float64 `yaml:"arrivals" help:"calls expected per period; the weights are then shares of it (normalised); 0: each weight is calls per period"`
	// RateBudget is how many calls may be admitted per period; 0: no such
	// budget (its dual is 0).
	RateBudget float64 `yaml:"rateBudget" help:"calls that may be admitted per period (the rate budget); 0: none"`
	// CostBudget is how many cost units may be spent per period; 0: no
	// such budget (its dual is 0).
	CostBudget float64 `yaml:"costBudget" help:"cost units that may be spent per period (the cost budget); 0: none"`
}

// Solution is the LP's optimum.
type Solution struct {
	RateDual  float64   // p_rate: the value of one more call of rate budget
	CostDual  float64   // p_cost: the value of one more unit of cost budget
	Admit     []float64 // per type, the fraction of its calls admitted (in [0, 1])
	Objective float64   // the total value admitted per period
}

// Price is the bid price of a call of cost c: p_rate + p_cost·c.
func (s Solution) Price(cost float64) float64 { return s.RateDual + s.CostDual*cost }

// eps is the tolerance of comparisons, relative to the scale of the
// numbers compared.
const eps = 1e-9

// Solve solves the fluid LP of w.
func Solve(w Workload) (Solution, error) {
	n, err := counts(w)
	if err != nil {
		return Solution{}, err
	}
	x, obj := primal(w, n)
	pr, pc := duals(w, n)
	if d := dualValue(w, n, pr, pc); math.Abs(d-obj) > 1e-6*max(1, math.Abs(obj)) {
		// Unreachable for a valid workload (strong duality); a guard
		// against a numerical failure handing out wrong prices.
		return Solution{}, fmt.Errorf("fluidlp: no optimum found (primal %v, dual %v)", obj, d)
	}
	return Solution{RateDual: pr, CostDual: pc, Admit: x, Objective: obj}, nil
}

// counts validates w and returns each type's calls per period.
func counts(w Workload) ([]float64, error) {
	if len(w.Types) == 0 {
		return nil, errors.New("fluidlp: a workload needs at least one type")
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }
	if !finite(w.Arrivals) || !finite(w.RateBudget) || !finite(w.CostBudget) {
		return nil, fmt.Errorf("fluidlp: arrivals, rateBudget and costBudget must be finite and >= 0 (got %v, %v, %v)", w.Arrivals, w.RateBudget, w.CostBudget)
	}
	sum := 0.0
	for i, t := range w.Types {
		if !finite(t.Cost) || !finite(t.Value) || !finite(t.Weight) {
			return nil, fmt.Errorf("fluidlp: type %d: cost, value and weight must be finite and >= 0 (got %+v)", i, t)
		}
		sum += t.Weight
	}
	if sum == 0 {
		return nil, errors.New("fluidlp: every weight is 0")
	}
	n := make([]float64, len(w.Types))
	for i, t := range w.Types {
		n[i] = t.Weight
		if w.Arrivals > 0 {
			n[i] = w.Arrivals * t.Weight / sum
		}
	}
	return n, nil
}

// dualValue is the LP dual's objective at (pr, pc): the budgets priced,
// plus each type's surplus over its price (the dual of x_i <= 1).
func dualValue(w Workload, n []float64, pr, pc float64) float64 {
	d := w.RateBudget*pr + w.CostBudget*pc
	for i, t := range w.Types {
		d += n[i] * max(0, t.Value-pr-pc*t.Cost)
	}
	return d
}

// duals minimises dualValue over p >= 0 (p_rate = 0 without a rate budget,
// p_cost = 0 without a cost budget). The function is convex and piecewise
// linear, with pieces bounded by the axes and the lines v_i = pr + pc·c_i,
// so a minimum lies on a vertex of that arrangement: try them all. Of
// several minima it returns the highest prices.
func duals(w Workload, n []float64) (pr, pc float64) {
	hasR, hasC := w.RateBudget > 0, w.CostBudget > 0
	type pt struct{ r, c float64 }
	cands := []pt{{0, 0}}
	for i, t := range w.Types {
		if hasR {
			cands = append(cands, pt{t.Value, 0})
		}
		if hasC && t.Cost > 0 {
			cands = append(cands, pt{0, t.Value / t.Cost})
		}
		if !hasR || !hasC {
			continue
		}
		for _, u := range w.Types[i+1:] {
			// pr + pc·c_t = v_t and pr + pc·c_u = v_u.
			if t.Cost == u.Cost {
				continue
			}
			c := (t.Value - u.Value) / (t.Cost - u.Cost)
			r := t.Value - c*t.Cost
			if r >= 0 && c >= 0 {
				cands = append(cands, pt{r, c})
			}
		}
	}
	best, bestV, bestTie := pt{}, math.Inf(1), math.Inf(-1)
	scale := 1.0
	for i, t := range w.Types {
		scale = max(scale, n[i]*t.Value)
	}
	for _, p := range cands {
		v := dualValue(w, n, p.r, p.c)
		// Tie-break: the higher prices, summed over the calls of the
		// workload (so the budget that binds decides).
		tie := 0.0
		for i, t := range w.Types {
			tie += n[i] * (p.r + p.c*t.Cost)
		}
		switch {
		case v < bestV-eps*scale:
			best, bestV, bestTie = p, v, tie
		case v <= bestV+eps*scale && tie > bestTie:
			best, bestTie = p, tie
			bestV = min(bestV, v)
		}
	}
	return best.r, best.c
}

// primal solves the LP by the simplex method on its tableau: maximise c·x
// subject to A·x <= b, x >= 0, with b >= 0 (so the slack basis is feasible
// and no first phase is needed), Bland's rule against cycling.
func primal(w Workload, n []float64) (x []float64, obj float64) {
	k := len(w.Types)
	var rows [][]float64 // each: k coefficients, then the bound
	if w.RateBudget > 0 {
		r := make([]float64, k+1)
		copy(r, n)
		r[k] = w.RateBudget
		rows = append(rows, r)
	}
	if w.CostBudget > 0 {
		r := make([]float64, k+1)
		for i, t := range w.Types {
			r[i] = n[i] * t.Cost
		}
		r[k] = w.CostBudget
		rows = append(rows, r)
	}
	for i := range k {
		r := make([]float64, k+1)
		r[i], r[k] = 1, 1
		rows = append(rows, r)
	}
	m := len(rows)
	cols := k + m // the variables, then one slack per row
	tab := make([][]float64, m+1)
	for i, r := range rows {
		tab[i] = make([]float64, cols+1)
		copy(tab[i], r[:k])
		tab[i][k+i] = 1
		tab[i][cols] = r[k]
	}
	z := make([]float64, cols+1) // the objective row: -c
	for i, t := range w.Types {
		z[i] = -n[i] * t.Value
	}
	tab[m] = z
	basis := make([]int, m)
	for i := range basis {
		basis[i] = k + i
	}
	for {
		enter := -1
		for j := range cols {
			if z[j] < -eps*max(1, math.Abs(z[j])) && z[j] < -eps {
				enter = j
				break
			}
		}
		if enter < 0 {
			break
		}
		leave, ratio := -1, math.Inf(1)
		for i := range m {
			a := tab[i][enter]
			if a <= eps {
				continue
			}
			r := tab[i][cols] / a
			if r < ratio-eps || (r <= ratio+eps && leave >= 0 && basis[i] < basis[leave]) {
				leave, ratio = i, r
			}
		}
		if leave < 0 {
			break // unbounded: impossible, every x_i <= 1
		}
		pivot(tab, leave, enter)
		basis[leave] = enter
	}
	x = make([]float64, k)
	for i, b := range basis {
		if b < k {
			x[b] = min(max(tab[i][cols], 0), 1)
		}
	}
	for i, t := range w.Types {
		obj += n[i] * t.Value * x[i]
	}
	return x, obj
}

func pivot(tab [][]float64, row, col int) {
	p := tab[row][col]
	for j := range tab[row] {
		tab[row][j] /= p
	}
	for i := range tab {
		if i == row || tab[i][col] == 0 {
			continue
		}
		f := tab[i][col]
		for j := range tab[i] {
			tab[i][j] -= f * tab[row][j]
		}
	}
}
