package server

import (
	"context"
	"sync"
	"time"
)

// lifeContext is a connection's context: it ends (context.Canceled) when
// the connection does. It replaces context.WithCancel, which allocates a
// cancelCtx and a cancel func for every connection, most of which never
// run a call that looks at them: this one is only its fields until someone
// asks for Done. It implements AfterFunc, so contexts derived from it (an
// application handler's timeouts, an HTTP request in the RPC proxy)
// register a callback instead of starting a goroutine each.
//
// Its values are the upgrade request's (values: r.Context(), read only
// through Value), so what middleware put there before the upgrade (a
// request id, a trace span, an authenticated principal) reaches every
// handler. Its cancellation is not: the request's context ends when the
// upgrade's handler returns, long before the connection does.
type lifeContext struct {
	values context.Context // the upgrade request's context; nil: no values

	mu    sync.Mutex
	done  chan struct{} // made by the first Done; closed by end
	ended bool          // end has run
	after []*afterFunc  // registered by AfterFunc and not yet stopped
}

type afterFunc struct {
	f func()
}

var _ context.Context = (*lifeContext)(nil)

func (x *lifeContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (x *lifeContext) Value(key any) any {
	if x.values == nil {
		return nil
	}
	return x.values.Value(key)
}

func (x *lifeContext) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		x.done = make(chan struct{})
		if x.ended {
			close(x.done)
		}
	}
	return x.done
}

func (x *lifeContext) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended {
		return context.Canceled
	}
	return nil
}

func (x *lifeContext) String() string { return "server.connectionContext" }

// AfterFunc arranges for f to run in its own goroutine once the context
// ends (at once if it has); stop unregisters it and reports whether it
// did so before f was started, as context.AfterFunc.
func (x *lifeContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	x.mu.Lock()
	if x.ended {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	x.after = append(x.after, a)
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		for i, b := range x.after {
			if b == a {
				x.after[i] = x.after[len(x.after)-1]
				x.after[len(x.after)-1] = nil
				x.after = x.after[:len(x.after)-1]
				return true
			}
		}
		return false
	}
}

// end ends the context (once) and starts the registered functions.
func (x *lifeContext) end() {
	x.mu.Lock()
	if x.ended {
		x.mu.Unlock()
		return
	}
	x.ended = true
	if x.done != nil {
		close(x.done)
	}
	after := x.after
	x.after = nil
	x.mu.Unlock()
	for _, a := range after {
		go a.f()
	}
}
