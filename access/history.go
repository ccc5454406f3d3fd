package access

import (
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/protocol"
)

// Which topics keep history (docs/history.md) is decided like presence:
// by the first namespace whose pattern has the topic's shape ({user}
// standing for any one user), else by the default rule. A topic's history
// must not depend on who asks: an instance that receives a message
// decides by the topic alone.

// KeepsHistory reports whether any topic keeps history.
func (c *Checker) KeepsHistory() bool { return c.keepHistory }

// HistoryOf is topic's history policy (the zero policy: none).
func (c *Checker) HistoryOf(topic string) history.Policy {
	if !c.keepHistory || protocol.Reserved(topic) {
		return history.Policy{}
	}
	for i := range c.ns {
		if c.ns[i].pat.match(topic) {
			return c.ns[i].hist
		}
	}
	return c.defHist
}
