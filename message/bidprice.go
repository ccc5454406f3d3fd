package message

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/rtserver/rtserver/message/fluidlp"
)

// BidPrice is value-aware admission (revenue management's bid-price
// filter): a call is admitted only if its value clears the shadow price of
// the budgets it would spend,
//
//	value >= p_rate + p_cost × cost
//
// where cost is the call's price under the class's Cost part and
// (p_rate, p_cost) are the duals of the workload's fluid LP (package
// fluidlp), solved once at Register, or given directly. When the cost
// budget binds, plain admission spends it on whatever arrives first,
// including cheap-to-pass, low-value, cost-heavy calls that starve
// valuable ones arriving later; the filter keeps the budget for the calls
// that are worth it.
//
// The filter only ever removes admits: it runs before the rate and cost
// parts and spends nothing, so it can never breach a limit. A call it
// denies is answered with reason POLICY. It needs a Cost part. Static
// prices fit a steady mix of calls; under long runs of one type they can
// do worse than no filter (docs/admission.md).
type BidPrice struct {
	// Value is every call's value when ValueOf is empty. 0: 1.
	Value float64 `yaml:"value" help:"every call's value, when valueOf is empty (positive); empty: 1"`
	// ValueOf is "param:<name>": the call's top-level numeric param
	// <name>, rounded up, read as Cost.Of reads its param. A call without
	// it is a rule error decided by FailPolicy.
	ValueOf string `yaml:"valueOf" help:"param:NAME: a call's value is its top-level numeric param NAME, rounded up (a call without it is decided by admission.failPolicy); empty: the constant value"`
	// Duals are the bid prices given directly (e.g. solved offline with
	// fluidlp.Solve). Exactly one of Duals and Workload.
	Duals *Duals `yaml:"duals,omitempty"`
	// Workload is the model whose fluid LP gives the prices, solved once
	// at Register.
	Workload *fluidlp.Workload `yaml:"workload,omitempty"`
}

// Duals are the prices of one call (Rate) and of one unit of cost (Cost).
type Duals struct {
	Rate float64 `yaml:"rate" help:"p_rate: the price of one call (>= 0)"`
	Cost float64 `yaml:"cost" help:"p_cost: the price of one unit of cost (>= 0)"`
}

// bidPart is a built BidPrice.
type bidPart struct {
	Duals
	value float64 // the constant value; used when param is ""
	param string
}

func buildBidPrice(b *BidPrice, hasCost bool) (*bidPart, error) {
	if !hasCost {
		return nil, errors.New("bidPrice: needs a cost part (the price is per unit of its cost)")
	}
	p := &bidPart{value: 1}
	if b.Value != 0 {
		if !(b.Value > 0) || math.IsInf(b.Value, 0) {
			return nil, fmt.Errorf("bidPrice: value must be a positive number (got %v)", b.Value)
		}
		p.value = b.Value
	}
	if b.ValueOf != "" {
		name, ok := strings.CutPrefix(b.ValueOf, "param:")
		if !ok || name == "" {
			return nil, fmt.Errorf("bidPrice: valueOf must be param:<name> (got %q)", b.ValueOf)
		}
		p.param = name
	}
	switch {
	case (b.Duals == nil) == (b.Workload == nil):
		return nil, errors.New("bidPrice: give exactly one of duals and workload")
	case b.Duals != nil:
		for _, v := range []float64{b.Duals.Rate, b.Duals.Cost} {
			if !(v >= 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("bidPrice: duals must be finite and >= 0 (got %+v)", *b.Duals)
			}
		}
		p.Duals = *b.Duals
	default:
		s, err := fluidlp.Solve(*b.Workload)
		if err != nil {
			return nil, fmt.Errorf("bidPrice: workload: %w", err)
		}
		p.Duals = Duals{Rate: s.RateDual, Cost: s.CostDual}
	}
	return p, nil
}

// bidTolerance absorbs floating-point error in the price, so that a call
// priced exactly at its value (the type an LP admits at the margin) is
// admitted.
const bidTolerance = 1e-9

// valueOf is the call's value; ok is false when its param cannot be read.
func (p *bidPart) valueOf(call *Call) (v float64, ok bool) {
	if p.param == "" {
		return p.value, true
	}
	n, ok := paramCost(call.Params, p.param)
	return float64(n), ok
}

// Admits reports whether a call of the given value and cost clears the bid
// price: value >= Rate + Cost × cost (up to a relative 1e-9 of
// floating-point error, so a call priced exactly at its value is
// admitted). Check uses it; it is exported for offline evaluation.
func (d Duals) Admits(value, cost float64) bool {
	price := d.Rate + d.Cost*cost
	return value >= price-bidTolerance*max(1, price)
}
