package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/rtserver/rtserver/internal/ctxsleep"
	"github.com/rtserver/rtserver/protocol"
)

// Defaults applied to zero Options fields.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 20 * time.Second
	// DefaultReadLimit bounds one server frame. A batch frame coalesces at
	// most what the server queued for us (limits.sendQueueBytes, 1 MiB by
	// default), so 4 MiB leaves room for a server configured higher.
	DefaultReadLimit = 4 << 20
)

// State is the client's connection state, reported to Options.OnState.
type State int

const (
	// Connecting: a dial is in progress (the first, or a reconnect).
	Connecting State = iota
	// Connected: the connection is up and, after a reconnect, every live
	// subscription has been sent again.
	Connected
	// Disconnected: the connection dropped; the client waits out its
	// backoff before the next attempt.
	Disconnected
	// Closed: final. Close was called, or the server refused in a way that
	// does not reconnect (the error passed to OnState says which).
	Closed
)

func (s State) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Closed:
		return "closed"
	}
	return "unknown"
}

// Options configure Dial. A nil *Options is DefaultOptions(): reconnect
// on, every other field at its default. In an Options value each field's
// zero value is its documented default, except Reconnect, whose zero value
// (false) closes the client at the first drop: start from DefaultOptions
// and change fields.
type Options struct {
	// Header is sent with the upgrade request.
	Header http.Header
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// TokenFunc, when set, is asked for a token before every connection
	// attempt (sent as "Authorization: Bearer <token>" in place of Token)
	// and again when the server announces that the connection's token is
	// expiring (the system event tokenExpiring): the client then sends the
	// new one with the refresh method, and the connection lives on. With
	// it, a close 1008 "token expired" and a 401 on reconnect are retried
	// with a fresh token (a second 401 in a row is final); an error it
	// returns fails that attempt (Dial returns it; reconnects back off and
	// try again). It must be safe to call from several goroutines.
	TokenFunc func(ctx context.Context) (string, error)
	// Subprotocols offered. nil offers protocol.BatchSubprotocol (the client always accepts arrays); a non-nil slice is
	// sent as given (an empty slice offers none, and the server then sends
	// one JSON value per frame).
	Subprotocols []string
	// Binary speaks the binary protocol (protocol.BinarySubprotocol,
	// docs/protocol.md): frames of MessagePack, in which Bytes travel as
	// raw bytes rather than base64. nil Subprotocols then offers only it.
	// The API is the same: data still reaches handlers as JSON, bytes in
	// their JSON form (BytesOf reads them).
	Binary bool
	// HTTPClient for the upgrade; nil is http.DefaultClient. A Timeout on
	// it bounds each handshake.
	HTTPClient *http.Client

	// Reconnect makes the client dial again, with backoff, after the
	// connection drops, and resubscribe. false (the zero value): the first
	// drop closes the client (Done, Err).
	Reconnect bool
	// MinBackoff is the base of the exponential backoff; 0 is
	// DefaultMinBackoff.
	MinBackoff time.Duration
	// MaxBackoff caps it (server hints may exceed it); 0 is
	// DefaultMaxBackoff.
	MaxBackoff time.Duration
	// ReadLimit is the largest server frame accepted, in bytes; 0 is
	// DefaultReadLimit. A bigger frame closes the connection with 1009.
	ReadLimit int64

	// OnSystem is called for each "system" notification (degraded,
	// recovered, draining, tokenExpiring, unsubscribed) with the event
	// name and the whole params object. It runs on the handler goroutine,
	// in order with messages. The client has already acted on the events
	// that concern it: a refresh started for tokenExpiring (with
	// TokenFunc), the topic forgotten for unsubscribed.
	OnSystem func(event string, params json.RawMessage)
	// OnRecovery is called after every reconnect (and resync) for each
	// subscription to a history topic (docs/history.md): recovered true
	// when every message missed meanwhile was replayed (they arrive next,
	// in order, once each), false with the server's reason ("epoch",
	// "trimmed", "tooMany") when they are gone: reload the topic's state
	// then. It runs on the handler goroutine, in order with messages.
	OnRecovery func(topic string, recovered bool, reason string)
	// OnPresence is called for each presence notification: the coalesced
	// joins and leaves of a subscribed topic whose namespace has joinLeave
	// (docs/presence.md). It runs on the handler goroutine, in order with
	// messages.
	OnPresence func(d PresenceDiff)
	// OnState is called on every state change, with the error that caused
	// it (nil for Connecting, Connected and a Close by the caller). Calls
	// never overlap and come in order. It must not call Close (which waits
	// for it); "go c.Close()" is fine.
	OnState func(s State, err error)
	// Logger receives debug and warning logs; nil discards them.
	Logger *slog.Logger

	// Sleep waits d or until ctx is done (returning ctx.Err()). nil uses a
	// timer. Tests inject it to observe (and skip) every backoff the
	// client chooses.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform float64 in [0, 1) for backoff jitter; nil uses
	// math/rand/v2.
	Rand func() float64
}

// DefaultOptions returns options with Reconnect on and every other field at
// its default: what an application talking to rtserver usually wants.
func DefaultOptions() *Options {
	return &Options{Reconnect: true}
}

// withDefaults returns a copy of o with defaults filled in.
func (o *Options) withDefaults() Options {
	if o == nil {
		o = DefaultOptions()
	}
	v := *o
	if v.Subprotocols == nil {
		v.Subprotocols = []string{protocol.BatchSubprotocol}
		if v.Binary {
			v.Subprotocols = []string{protocol.BinarySubprotocol}
		}
	}
	if v.MinBackoff <= 0 {
		v.MinBackoff = DefaultMinBackoff
	}
	if v.MaxBackoff <= 0 {
		v.MaxBackoff = DefaultMaxBackoff
	}
	v.MaxBackoff = max(v.MaxBackoff, v.MinBackoff)
	if v.ReadLimit <= 0 {
		v.ReadLimit = DefaultReadLimit
	}
	if v.Logger == nil {
		v.Logger = slog.New(slog.DiscardHandler)
	}
	if v.Sleep == nil {
		v.Sleep = ctxsleep.Sleep
	}
	if v.Rand == nil {
		v.Rand = rand.Float64
	}
	h := v.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if v.Token != "" {
		h.Set("Authorization", "Bearer "+v.Token)
	}
	v.Header = h
	return v
}
