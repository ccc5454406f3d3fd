package client

import (
	"context"
	"encoding/json"
	"github.com/rtserver/rtserver/protocol"
)

// HistoryPage is a history call's answer: the topic's current position
// (Epoch, Offset: the last message now) and the messages asked for,
// oldest first.
type HistoryPage struct {
	Epoch    string           `json:"epoch"`
	Offset   uint64           `json:"offset"`
	Messages []HistoryMessage `json:"messages"`
}

// HistoryMessage is one message of a HistoryPage.
type HistoryMessage struct {
	Offset uint64          `json:"offset"`
	Data   json.RawMessage `json:"data"`
}

type historyParams struct {
	Topic string    `json:"topic"`
	Since *Position `json:"since,omitempty"`
	Limit int       `json:"limit,omitempty"`
}

// History reads a history topic's stored messages (docs/history.md):
// those after since, or with the zero since the newest; at most limit of
// them (0: the server's default, 100; at most 1,000). It needs the
// subscribe grant (-32003 otherwise); a topic without history answers
// -32602. A since of another epoch returns no messages: the page's Epoch
// says which epoch the topic is in.
func (c *Client) History(ctx context.Context, topic string, since Position, limit int) (HistoryPage, error) {
	p := historyParams{Topic: topic, Limit: limit}
	if since.Epoch != "" {
		p.Since = &since
	}
	var page HistoryPage
	err := c.Call(ctx, protocol.MethodHistory, p, &page)
	return page, err
}
