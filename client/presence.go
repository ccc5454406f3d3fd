package client

import (
	"context"
	"encoding/json"
	"github.com/rtserver/rtserver/protocol"
)

// Presence (docs/presence.md): who is subscribed to a topic, fleet-wide,
// for topics the server keeps presence of.

// PresenceEntry is one connection present in a topic.
type PresenceEntry struct {
	Client string `json:"client"` // the connection's id, unique across the fleet
	User   string `json:"user"`   // its user; "" when anonymous
	// Name is the display name it connected with (a name parameter on
	// the URL given to Dial), if any: the client's own word.
	Name string `json:"name,omitempty"`
}

// PresencePage is one page of a topic's presence. Cursor continues the
// listing; "" when there is nothing more.
type PresencePage struct {
	Clients []PresenceEntry `json:"clients"`
	Cursor  string          `json:"cursor"`
}

// PresenceStats counts a topic's presence.
type PresenceStats struct {
	Clients int64 `json:"clients"`
	Users   int64 `json:"users"`
}

// PresenceDiff is a presence notification: the joins and leaves of a
// topic since the previous one, coalesced by the server (at most one per
// presence.diffInterval per topic).
type PresenceDiff struct {
	Topic  string          `json:"topic"`
	Joins  []PresenceEntry `json:"joins"`
	Leaves []PresenceEntry `json:"leaves"`
}

type presenceParams struct {
	Topic  string `json:"topic"`
	Cursor string `json:"cursor,omitempty"`
}

// Presence lists one page (at most 1,000 entries) of topic's presence
// after cursor ("" for the first page). It needs the subscribe grant
// (-32003 otherwise); a topic without presence answers -32602.
func (c *Client) Presence(ctx context.Context, topic, cursor string) (PresencePage, error) {
	var p PresencePage
	err := c.Call(ctx, protocol.MethodPresence, presenceParams{Topic: topic, Cursor: cursor}, &p)
	return p, err
}

// PresenceAll lists every page of topic's presence.
func (c *Client) PresenceAll(ctx context.Context, topic string) ([]PresenceEntry, error) {
	var all []PresenceEntry
	cursor := ""
	for {
		p, err := c.Presence(ctx, topic, cursor)
		if err != nil {
			return all, err
		}
		all = append(all, p.Clients...)
		if p.Cursor == "" {
			return all, nil
		}
		cursor = p.Cursor
	}
}

// PresenceStats counts topic's presence: connections and distinct users.
func (c *Client) PresenceStats(ctx context.Context, topic string) (PresenceStats, error) {
	var s PresenceStats
	err := c.Call(ctx, protocol.MethodPresenceStats, presenceParams{Topic: topic}, &s)
	return s, err
}

// presenceDiff hands a presence notification to Options.OnPresence.
func (c *Client) presenceDiff(params json.RawMessage) {
	if c.opts.OnPresence == nil {
		return
	}
	var d PresenceDiff
	if err := json.Unmarshal(params, &d); err != nil {
		c.opts.Logger.Warn("rtclient: bad presence notification", "err", err)
		return
	}
	c.opts.OnPresence(d)
}
