// Package logx keeps a flood of identical warnings from becoming a flood of
// log lines.
//
// Limit wraps a slog.Handler: records at Warn and above with the same
// message are written at most once per interval; the next one written
// carries suppressed=N, the number dropped since. Messages are constant
// strings in rtserver's code (client data goes in attributes), so the
// number of keys is bounded by the code; a hard cap guards it anyway.
// Debug records are limited the same way: they are the per-request
// diagnostics (why a token or a call was refused) that a client can
// trigger at will. Info records pass through untouched.
package logx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxKeys bounds the messages tracked; past it, new messages pass through
// unlimited rather than growing the map.
const maxKeys = 1024

type state struct {
	mu    sync.Mutex
	every time.Duration
	now   func() time.Time
	seen  map[string]*entry
}

type entry struct {
	last       time.Time
	suppressed int
}

type handler struct {
	inner slog.Handler
	s     *state
}

// Limit returns h with repeated warnings (and debug records) limited to
// one per every. now is the clock (nil: time.Now).
func Limit(h slog.Handler, every time.Duration, now func() time.Time) slog.Handler {
	if now == nil {
		now = time.Now
	}
	return &handler{inner: h, s: &state{every: every, now: now, seen: map[string]*entry{}}}
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && r.Level > slog.LevelDebug {
		return h.inner.Handle(ctx, r)
	}
	s := h.s
	s.mu.Lock()
	e := s.seen[r.Message]
	if e == nil {
		if len(s.seen) >= maxKeys {
			s.mu.Unlock()
			return h.inner.Handle(ctx, r)
		}
		e = &entry{}
		s.seen[r.Message] = e
	} else if s.now().Sub(e.last) < s.every {
		e.suppressed++
		s.mu.Unlock()
		return nil
	}
	e.last = s.now()
	n := e.suppressed
	e.suppressed = 0
	s.mu.Unlock()
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", n))
	}
	return h.inner.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(attrs), s: h.s}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name), s: h.s}
}

// Printf adapts a logger to the Printf(ctx, format, args...) interface of
// libraries that log free text, such as go-redis (redis.SetLogger). Each
// line becomes one Warn record with the constant message Msg, so that a
// Limit handler under Logger lets one through per interval with a count
// instead of a line per failed dial, and the library's text goes in
// "detail".
type Printf struct {
	Logger *slog.Logger
	Msg    string
}

// Printf logs one line of the library's.
func (p Printf) Printf(ctx context.Context, format string, v ...any) {
	p.Logger.WarnContext(ctx, p.Msg, "detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}
