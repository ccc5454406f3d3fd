package message

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rtserver/rtserver/internal/conf"
)

// Config is the message tier of docs/configuration.md (admission.*): the
// classes, the routing of methods to classes, and the fail policy. The
// zero value has no classes: every call is admitted.
type Config struct {
	Classes    map[string]Rule   `yaml:"classes" help:"class name -> rule (see Class rules); default: none"`
	Methods    map[string]string `yaml:"methods" help:"method name or path.Match glob -> class; exact names win over globs; unmatched methods are admitted; default: none"`
	FailPolicy FailPolicy        `yaml:"failPolicy" help:"what a rule that errors or panics decides: open | closed"`
}

// MarshalText is the config word: open or closed.
func (p FailPolicy) MarshalText() ([]byte, error) {
	switch p {
	case FailOpen, FailClosed:
		return []byte(p.String()), nil
	}
	return nil, fmt.Errorf("unknown fail policy %d", int(p))
}

// UnmarshalText reads open or closed.
func (p *FailPolicy) UnmarshalText(b []byte) error {
	v, err := ParseFailPolicy(string(b))
	if err != nil {
		return fmt.Errorf("want open or closed")
	}
	*p = v
	return nil
}

// WithDefaults spells out the defaults of each class rule's empty words
// (by, strategy, scope), so a printed configuration shows what is in
// effect.
func (c Config) WithDefaults() Config {
	if c.Classes == nil {
		return c
	}
	classes := make(map[string]Rule, len(c.Classes))
	for name, r := range c.Classes {
		if p := r.ClusterTopPublisher; p != nil {
			q := *p
			q.By = cmp.Or(q.By, "topic")
			r.ClusterTopPublisher = &q
		}
		if p := r.Rate; p != nil {
			q := *p
			q.By = cmp.Or(q.By, "user")
			q.Strategy = cmp.Or(q.Strategy, "gcra")
			q.Scope = cmp.Or(q.Scope, "local")
			r.Rate = &q
		}
		if p := r.Cost; p != nil {
			q := *p
			q.By = cmp.Or(q.By, "user")
			q.Scope = cmp.Or(q.Scope, "local")
			r.Cost = &q
		}
		if p := r.AdaptiveConcurrency; p != nil {
			q := *p
			q.Scope = cmp.Or(q.Scope, "local")
			if q.Scope == "cluster" {
				q.Aggregate = cmp.Or(q.Aggregate, "median")
			}
			r.AdaptiveConcurrency = &q
		}
		classes[name] = r
	}
	c.Classes = classes
	return c
}

// ClusterScoped reports whether some class has a rate, cost or adaptive
// concurrency part with scope cluster (it needs a shared store such as
// Redis).
func (c Config) ClusterScoped() bool {
	for _, r := range c.Classes {
		if (r.Rate != nil && r.Rate.Scope == "cluster") || (r.Cost != nil && r.Cost.Scope == "cluster") ||
			(r.AdaptiveConcurrency != nil && r.AdaptiveConcurrency.Scope == "cluster") {
			return true
		}
	}
	return false
}

// Validate reports every invalid admission.* value at once, naming each
// key (admission.classes.NAME.rate.limit).
func (c Config) Validate() error { return c.ValidateWith(Deps{}) }

// ValidateWith is Validate knowing deps.Predicates, as New checks c: a
// class with a predicate needs no other part, and a predicate needs its
// class in c.Classes.
func (c Config) ValidateWith(deps Deps) error {
	var p conf.Problems
	for _, name := range slices.Sorted(maps.Keys(deps.Predicates)) {
		if _, ok := c.Classes[name]; !ok {
			p.Add("admission.classes."+name, "a predicate is registered for class %q, which admission.classes lacks", name)
		} else if deps.Predicates[name] == nil {
			p.Add("admission.classes."+name, "nil predicate")
		}
	}
	oneOf := func(key, got string, allowed ...string) {
		if !slices.Contains(allowed, got) {
			p.Add(key, "must be %s, got %q", strings.Join(allowed, " or "), got)
		}
	}
	if _, err := c.FailPolicy.MarshalText(); err != nil {
		p.Add("admission.failPolicy", "must be open or closed, got %d", int(c.FailPolicy))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Classes)) {
		r := c.Classes[name]
		key := "admission.classes." + name
		if name == "" || !utf8.ValidString(name) {
			p.Add(key, "class name must be non-empty UTF-8 text")
		}
		if len(r.Reasons) == 0 && deps.Predicates[name] == nil && r.ClusterTopPublisher == nil && r.Rate == nil && r.Cost == nil && r.BidPrice == nil && r.Concurrency == nil && r.AdaptiveConcurrency == nil {
			p.Add(key, "a rule needs at least one of reasons, clusterTopPublisher, rate, cost, concurrency, adaptiveConcurrency")
		}
		for i, reason := range r.Reasons {
			if _, ok := pressureCode(reason); !ok {
				p.Add(fmt.Sprintf("%s.reasons[%d]", key, i), "unknown reason %v (want MEMORY, PUBLISH_RATE or SUBSCRIBERS)", reason)
			}
		}
		if t := r.ClusterTopPublisher; t != nil {
			if !(t.Threshold > 0) || math.IsInf(t.Threshold, 0) {
				p.Add(key+".clusterTopPublisher.threshold", "must be a positive number, got %v", t.Threshold)
			}
			oneOf(key+".clusterTopPublisher.by", cmp.Or(t.By, "topic"), "topic", "user")
		}
		var rateBy string
		if rt := r.Rate; rt != nil {
			p.Positive(key+".rate.limit", int64(rt.Limit))
			p.PositiveDuration(key+".rate.per", rt.Per)
			rateBy = cmp.Or(rt.By, "user")
			oneOf(key+".rate.by", rateBy, "user", "conn", "ip")
			oneOf(key+".rate.strategy", cmp.Or(rt.Strategy, "gcra"), "gcra", "slidingWindow")
			oneOf(key+".rate.scope", cmp.Or(rt.Scope, "local"), "local", "cluster")
			if rt.Scope == "cluster" {
				if rt.Strategy == "slidingWindow" {
					p.Add(key+".rate.scope", "cluster supports strategy gcra only (a sliding window is per instance)")
				}
				if rateBy == "conn" {
					p.Add(key+".rate.scope", "cluster cannot be by conn (a connection lives on one instance); use scope local")
				}
			}
		}
		if ct := r.Cost; ct != nil {
			if ct.Budget < 1 || ct.Budget > math.MaxInt32 {
				p.Add(key+".cost.budget", "must be in [1, %d], got %d", math.MaxInt32, ct.Budget)
			}
			p.PositiveDuration(key+".cost.per", ct.Per)
			if name, isParam := strings.CutPrefix(ct.Of, "param:"); !(ct.Of == "bytes" || ct.Of == "fanout" || (isParam && name != "")) {
				p.Add(key+".cost.of", "must be bytes, fanout or param:<name>, got %q", ct.Of)
			}
			costBy := cmp.Or(ct.By, "user")
			oneOf(key+".cost.by", costBy, "user", "conn", "ip")
			oneOf(key+".cost.scope", cmp.Or(ct.Scope, "local"), "local", "cluster")
			if ct.Scope == "cluster" {
				if costBy == "conn" {
					p.Add(key+".cost.scope", "cluster cannot be by conn (a connection lives on one instance); use scope local")
				}
				if rt := r.Rate; rt != nil && rt.Scope == "cluster" && rateBy != costBy {
					p.Add(key+".cost.by", "must equal rate.by (%q) when both are scope cluster: they share one key and one round trip", rateBy)
				}
			}
		}
		if b := r.BidPrice; b != nil {
			if r.Cost == nil {
				p.Add(key+".bidPrice", "needs a cost part (the price is per unit of its cost)")
			}
			if _, err := buildBidPrice(b, true); err != nil {
				p.Add(key+".bidPrice", "%s", strings.TrimPrefix(err.Error(), "bidPrice: "))
			}
		}
		if ac := r.AdaptiveConcurrency; ac != nil {
			p.Positive(key+".adaptiveConcurrency.min", int64(ac.Min))
			if ac.Max < ac.Min || ac.Max < 1 {
				p.Add(key+".adaptiveConcurrency.max", "must be at least min (%d), got %d", ac.Min, ac.Max)
			}
			oneOf(key+".adaptiveConcurrency.scope", cmp.Or(ac.Scope, "local"), "local", "cluster")
			oneOf(key+".adaptiveConcurrency.aggregate", cmp.Or(ac.Aggregate, "median"), "median", "mean", "min", "max")
		}
		if cc := r.Concurrency; cc != nil {
			p.Positive(key+".concurrency.max", int64(cc.Max))
		}
	}
	for _, m := range slices.Sorted(maps.Keys(c.Methods)) {
		key := "admission.methods." + m
		switch {
		case !utf8.ValidString(m):
			p.Add(key, "method pattern must be UTF-8 text")
		case m == "":
			p.Add(key, "empty pattern")
		default:
			if _, err := path.Match(m, ""); err != nil {
				p.Add(key, "bad glob pattern %q (path.Match syntax)", m)
			}
		}
		if cl := c.Methods[m]; !hasClass(c.Classes, cl) {
			p.Add(key, "class %q is not defined in admission.classes", cl)
		}
	}
	return p.Err()
}

func hasClass(classes map[string]Rule, name string) bool {
	_, ok := classes[name]
	return ok
}
