package message

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// routerCacheMax bounds how many distinct method names a Router remembers
// glob results for. Method names come from clients: past the bound, a new
// name is matched against the globs on every call (bounded work, no
// growth) instead of being remembered.
const routerCacheMax = 1024

// Router maps method names (exact, or path.Match globs) to classes. It is
// immutable after NewRouter except for its glob cache, and safe for
// concurrent use.
type Router struct {
	exact map[string]*Class
	globs []globRoute // most specific first

	// cache is copy-on-write: readers do one atomic load and a map read;
	// a writer (a method seen for the first time) copies it under mu.
	mu    sync.Mutex
	cache atomic.Pointer[map[string]*Class]
}

type globRoute struct {
	pattern string
	class   *Class
}

// isGlob reports whether a method key uses path.Match syntax.
func isGlob(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// NewRouter builds a router; a method mapped to an unregistered class, or a
// malformed glob, is an error naming the method and the class.
//
// A method name matches its exact key if there is one; otherwise the
// longest glob pattern that matches it (equal lengths: the pattern first in
// byte order), so the result never depends on map iteration order.
func NewRouter(a *Admission, methods map[string]string) (*Router, error) {
	r := &Router{exact: map[string]*Class{}}
	keys := make([]string, 0, len(methods))
	for m := range methods {
		keys = append(keys, m)
	}
	slices.Sort(keys)
	for _, m := range keys {
		cl := methods[m]
		c, ok := a.Class(cl)
		if !ok {
			return nil, fmt.Errorf("message: method %q: class %q is not registered", m, cl)
		}
		if !isGlob(m) {
			r.exact[m] = c
			continue
		}
		if _, err := path.Match(m, ""); err != nil {
			return nil, fmt.Errorf("message: method %q (class %q): bad glob pattern: %w", m, cl, err)
		}
		r.globs = append(r.globs, globRoute{pattern: m, class: c})
	}
	slices.SortStableFunc(r.globs, func(x, y globRoute) int {
		if len(x.pattern) != len(y.pattern) {
			return len(y.pattern) - len(x.pattern)
		}
		return strings.Compare(x.pattern, y.pattern)
	})
	return r, nil
}

// ClassOf returns the class of method, or nil when no mapping matches (the
// call is admitted). Exact names win over globs. Allocation free for exact
// names and for methods whose glob result is cached (or once the cache is
// full); the first sight of a new method name copies the cache.
func (r *Router) ClassOf(method string) *Class {
	if c, ok := r.exact[method]; ok {
		return c
	}
	if len(r.globs) == 0 {
		return nil
	}
	if m := r.cache.Load(); m != nil {
		if c, ok := (*m)[method]; ok {
			return c
		}
	}
	c := r.match(method)
	r.remember(method, c)
	return c
}

func (r *Router) match(method string) *Class {
	for _, g := range r.globs {
		// Patterns were validated in NewRouter, so Match cannot fail.
		if ok, _ := path.Match(g.pattern, method); ok {
			return g.class
		}
	}
	return nil
}

// remember caches method's result (nil too: an unmatched method is as
// costly to re-match as a matched one) until the cache holds
// routerCacheMax names.
func (r *Router) remember(method string, c *Class) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cache.Load()
	n := 0
	if old != nil {
		n = len(*old)
		if _, ok := (*old)[method]; ok {
			return
		}
	}
	if n >= routerCacheMax {
		return
	}
	next := make(map[string]*Class, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	// Clone: the method may point into a larger decoded frame, which the
	// cache must not keep alive.
	next[strings.Clone(method)] = c
	r.cache.Store(&next)
}
