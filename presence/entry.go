package presence

import (
	"context"
	"errors"
	"strconv"
)

// ErrOff answers a presence question about a topic that keeps no
// presence.
var ErrOff = errors.New("presence is off for this topic (topics.namespaces[].presence)")

// Entry is one connection's presence in a topic.
type Entry struct {
	// Client is the connection's id, unique across the fleet for as long
	// as the connection lives (ClientID). It names the instance that holds
	// the connection, which is all the connection information an entry
	// carries beside the user.
	Client string `json:"client"`
	// User is the connection's user (the JWT sub); "" when anonymous.
	User string `json:"user"`
	// Name is the display name the connection stated when it connected
	// (handshake.DisplayName: at most 64 bytes, no control character);
	// "" when none. The client's own word, unlike User.
	Name string `json:"name,omitempty"`
}

// Stats is a topic's presence counts.
type Stats struct {
	Clients int64 `json:"clients"` // entries (connections)
	Users   int64 `json:"users"`   // distinct users among them; anonymous connections count as one user ""
}

// Page is one page of a topic's entries, ordered by client id. Cursor
// continues the listing; "" when there is nothing more.
type Page struct {
	Clients []Entry `json:"clients"`
	Cursor  string  `json:"cursor"`
}

// MaxPage is the most entries one page holds.
const MaxPage = 1000

// Change is one entry entering (Leave false) or leaving a topic.
type Change struct {
	Topic string
	Entry
	Leave bool
}

// Store holds the entries of every instance.
type Store interface {
	// Apply writes changes in one pipelined round trip. Adding an entry
	// that exists refreshes it; removing an absent one does nothing.
	Apply(ctx context.Context, changes []Change) error
	// Page lists up to limit (at most MaxPage) entries of topic after
	// cursor ("" for the first page).
	Page(ctx context.Context, topic, cursor string, limit int) (Page, error)
	// Stats counts topic's entries, in time independent of their number.
	Stats(ctx context.Context, topic string) (Stats, error)
}

// ClientID is the fleet-wide id of connection conn of instance: instance
// ids are random per process start, connection numbers never repeat
// within one, so the pair never repeats.
func ClientID(instance string, conn uint64) string {
	return instance + "." + strconv.FormatUint(conn, 10)
}
