package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/rtserver/rtserver/protocol"
)

// header is the upgrade request's header for one connection attempt: the
// configured one, with a fresh token from TokenFunc when set.
func (c *Client) header(ctx context.Context) (http.Header, error) {
	if c.opts.TokenFunc == nil {
		return c.opts.Header, nil
	}
	tok, err := c.opts.TokenFunc(ctx)
	if err != nil {
		return nil, fmt.Errorf("rtclient: token: %w", err)
	}
	h := c.opts.Header.Clone()
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	return h, nil
}

// final reports whether err (why the connection or the attempt ended)
// ends the client. The refusals that waiting cannot change are final
// (permanent), except two that a fresh token from TokenFunc can: a 401,
// unless the attempt before (prev) was refused with 401 too, and a close
// 1008 "token expired".
func (c *Client) final(err, prev error) bool {
	if !permanent(err) {
		return false
	}
	if c.opts.TokenFunc == nil {
		return true
	}
	if unauthorized(err) {
		return unauthorized(prev)
	}
	var ce *CloseError
	return !(errors.As(err, &ce) && ce.Code == 1008 && ce.Reason == protocol.ReasonTokenExpired)
}

func unauthorized(err error) bool {
	var he *HandshakeError
	return errors.As(err, &he) && he.Status == http.StatusUnauthorized
}

type refreshParams struct {
	Token string `json:"token"`
}

// refreshToken answers the server's tokenExpiring: a new token from
// TokenFunc, sent with the refresh method. When it fails the server
// closes the connection at exp (1008 token expired) and the client
// reconnects with a token fetched then.
func (c *Client) refreshToken() {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, handshakeTimeout)
	defer cancel()
	tok, err := c.opts.TokenFunc(ctx)
	if err == nil {
		err = c.Call(ctx, protocol.MethodRefresh, refreshParams{Token: tok}, nil)
	}
	if err != nil && c.ctx.Err() == nil {
		c.opts.Logger.Warn("rtclient: token refresh failed; reconnecting with a new token when the server closes", "err", err)
	}
}

// systemEvent acts on the system events that change the client's own
// state, on the reader goroutine, before the event is handed to OnSystem.
func (c *Client) systemEvent(event, topic string) {
	switch event {
	case protocol.EventTokenExpiring:
		if c.opts.TokenFunc != nil {
			c.wg.Add(1) // the reader holds a count: Wait cannot be at zero
			go c.refreshToken()
		}
	case protocol.EventUnsubscribed:
		// The server (its backend) took the topic away: it is forgotten,
		// not re-sent after a reconnect. Messages for it still queued are
		// dropped by the dispatcher.
		c.mu.Lock()
		delete(c.subs, topic)
		c.mu.Unlock()
		c.opts.Logger.Debug("rtclient: unsubscribed by the server", "topic", topic)
	case protocol.EventResync:
		c.resync(topic)
	}
}
