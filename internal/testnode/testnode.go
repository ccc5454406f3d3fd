// Package testnode starts an in-process rtserver node on a free loopback
// port for a test, and stops it (drain, then stop) when the test ends: the
// one start-up the package tests, examples and benchmarks share.
//
// It is for tests only, and apart from internal/testkit because it imports
// the root package, which the packages testkit serves cannot.
package testnode

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/rtserver/rtserver"
)

// Start builds a node from cfg and deps, runs before on it (handlers registered
// before serving), and serves it on 127.0.0.1 at a free port; addr is its
// host:port. The node shuts down (drain over cfg's drain.duration, then
// stop) when the test ends. The test fails if a step does.
func Start(t testing.TB, cfg rtserver.Config, deps rtserver.Deps, before ...func(*rtserver.Node)) (node *rtserver.Node, addr string) {
	t.Helper()
	node, err := rtserver.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(node)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()
	t.Cleanup(func() {
		if err := node.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, rtserver.ErrNodeClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return node, ln.Addr().String()
}
