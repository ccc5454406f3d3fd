package client

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rtserver/rtserver/internal/retryhint"
)

var (
	// ErrDisconnected is returned by a call that was in flight when the
	// connection dropped, or that was made while the client had no
	// connection (reconnecting). The call may or may not have reached the
	// server; it is never retried by the client. The error wraps the
	// cause when there is one (a *CloseError, a network error).
	ErrDisconnected = errors.New("rtclient: disconnected")
	// ErrClosed is returned once the client is closed: by Close/CloseNow,
	// or for good after a refusal that does not reconnect (see Client.Err).
	ErrClosed = errors.New("rtclient: client closed")
	// ErrAlreadySubscribed is returned by Subscribe for a topic this client
	// already has a live subscription to.
	ErrAlreadySubscribed = errors.New("rtclient: already subscribed")
)

// HandshakeError is an HTTP rejection of the WebSocket upgrade
// (docs/handshake.md): 503 or 429 with a retry hint, 401, 403, or anything else that
// is not 101.
type HandshakeError struct {
	Status int
	// RetryAfter is the server's hint: the body's, in milliseconds, when
	// present, else the Retry-After header (seconds or an
	// HTTP date). Zero when the server gave none.
	RetryAfter time.Duration
	// Body is the start of the response body (at most 1 KiB).
	Body []byte
}

func (e *HandshakeError) Error() string {
	s := "rtclient: handshake rejected: HTTP " + strconv.Itoa(e.Status)
	if e.Status == 401 || e.Status == 403 {
		// rtserver's refusals are one plain-text line saying why
		// (docs/authentication.md): worth showing the user.
		line, _, _ := strings.Cut(string(e.Body), "\n")
		if line = strings.TrimSpace(line); line != "" && len(line) <= 200 && utf8.ValidString(line) {
			s += " (" + line + ")"
		}
	}
	if e.RetryAfter > 0 {
		s += ", retry after " + e.RetryAfter.String()
	}
	return s
}

// CloseError is a WebSocket close frame sent by the server
// (docs/protocol.md, "Close codes"). Dial returns it when the server closes the connection right
// after the upgrade (handshake shed in close mode: 1013).
type CloseError struct {
	Code   int
	Reason string
	// RetryAfter is the hint carried in Reason (1012, 1013); zero when
	// absent.
	RetryAfter time.Duration
}

func (e *CloseError) Error() string {
	s := "rtclient: connection closed by server: " + strconv.Itoa(e.Code)
	if e.Reason != "" {
		s += " " + strconv.Quote(e.Reason)
	}
	return s
}

// permanent reports whether err is a refusal that waiting will not change,
// so the client must not reconnect.
func permanent(err error) bool {
	var he *HandshakeError
	if errors.As(err, &he) {
		return he.Status >= 400 && he.Status < 500 && he.Status != http.StatusTooManyRequests &&
			he.Status != http.StatusRequestTimeout
	}
	var ce *CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case 1002, // protocol error: our bytes are wrong, they will be again
			1003, // we sent a binary frame
			1007, // invalid payload data
			1008, // policy violation
			1009: // message too big
			return true
		}
	}
	return false
}

// retryHint returns the server's retry hint carried by err, or 0.
func retryHint(err error) time.Duration {
	var he *HandshakeError
	if errors.As(err, &he) {
		return he.RetryAfter
	}
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.RetryAfter
	}
	return 0
}

// handshakeError builds the error for a non-101 upgrade response.
func handshakeError(resp *http.Response, now time.Time) *HandshakeError {
	e := &HandshakeError{Status: resp.StatusCode}
	if resp.Body != nil {
		// coder/websocket has already buffered at most 1 KiB of it.
		b := make([]byte, 1024)
		n, _ := io.ReadFull(resp.Body, b)
		e.Body = b[:n]
		resp.Body.Close()
	}
	e.RetryAfter = retryhint.FromBody(e.Body)
	if e.RetryAfter == 0 {
		e.RetryAfter = retryhint.FromHeader(resp.Header.Get("Retry-After"), now)
	}
	return e
}
