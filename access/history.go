package access

import (
	"strings"

	"github.com/rtserver/rtserver/history"
)

// Which topics keep history (docs/history.md) is decided by the same
// namespaces as the grants, first match wins, the default rule last. A
// topic's policy must not depend on who asks (an instance that receives a
// message decides by the topic alone), so a pattern's {user} matches any
// user here, the way its owner's connections see it.

type historyNS struct {
	g   glob
	pol history.Policy
}

// compileHistory indexes every rule's history policy (Validate checked
// them).
func (c *Checker) compileHistory(cfg Config, def Rule) error {
	for _, n := range cfg.Namespaces {
		c.history = append(c.history, historyNS{
			g:   newGlob(strings.Replace(n.Pattern, userPlaceholder, "*", 1)),
			pol: n.History,
		})
		c.keepHistory = c.keepHistory || n.History.Enabled()
	}
	c.historyDef = def.History
	c.keepHistory = c.keepHistory || def.History.Enabled()
	return nil
}

// KeepsHistory reports whether any topic keeps history.
func (c *Checker) KeepsHistory() bool { return c.keepHistory }

// HistoryOf is topic's history policy (the zero policy: none).
func (c *Checker) HistoryOf(topic string) history.Policy {
	for i := range c.history {
		if c.history[i].g.match(topic) {
			return c.history[i].pol
		}
	}
	return c.historyDef
}
