package server

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// startServer runs a server behind a real TCP listener and returns its
// ws:// URL. cfg, at most one, is its configuration (default: the zero
// Config).
func startServer(t *testing.T, deps Deps, cfg ...Config) (*Server, string) {
	t.Helper()
	s := mustNew(t, deps, cfg...)
	return s, serve(t, s)
}

// mustNew is New, failing t on an error.
func mustNew(t testing.TB, deps Deps, cfg ...Config) *Server {
	t.Helper()
	var c Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	s, err := New(c, deps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// portableRun runs every server of this package's tests with
// limits.portableSockets on (scripts/test.sh runs the package both ways):
// the same behaviour is asked of both paths.
var portableRun = os.Getenv("RTSERVER_PORTABLE_SOCKETS") == "1"

// portableTest is portableRun for the tests that set it (withPortable).
var portableTest atomic.Bool

// withPortable serves the rest of the test's servers with
// limits.portableSockets on. Tests that use it must not run in parallel.
func withPortable(t *testing.T) {
	was := portableTest.Swap(true)
	t.Cleanup(func() { portableTest.Store(was) })
}

// fastPathOnly skips a test of what only the fast path does (parking,
// a send queue limit counted against what the socket would not take) when
// every server runs with limits.portableSockets on.
func fastPathOnly(t *testing.T) {
	if portableRun {
		t.Skip("a property of the fast path; RTSERVER_PORTABLE_SOCKETS=1 turns it off")
	}
}

// netHTTPTest serves the test's servers through net/http alone
// (withNetHTTP).
var netHTTPTest atomic.Bool

// withNetHTTP serves the rest of the test's servers through net/http
// alone, not the door: their upgrades go through the WebSocket library's
// Accept on the fast path too. Tests that use it must not run in
// parallel.
func withNetHTTP(t *testing.T) {
	was := netHTTPTest.Swap(true)
	t.Cleanup(func() { netHTTPTest.Store(was) })
}

// serve starts s, serves it over TCP until the test ends, and returns
// its WebSocket URL. On the fast path upgrades are served as the node
// serves them, by the door (handshake.ServingListener, with s's gate or
// one without limits), unless withNetHTTP; on the portable path by
// net/http.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	if portableRun || portableTest.Load() {
		s.cfg.PortableSockets = true
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s)
	if !s.cfg.PortableSockets && !netHTTPTest.Load() {
		g := s.gate
		if g == nil {
			g = testkit.Must(handshake.New(handshake.Config{}, handshake.Deps{}))
		}
		hs.Listener = g.ServingListener(hs.Listener, "/", s)
	}
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}

// tier is a message tier of one class for a test, with the pressure
// monitor and metrics it runs on.
type tier struct {
	m      *metrics.Metrics
	mon    *pressure.Monitor
	adm    *message.Admission
	router *message.Router
}

// newTier registers class with rule and routes methods (patterns) to
// classes.
func newTier(t *testing.T, class string, rule message.Rule, routes map[string]string) tier {
	t.Helper()
	m := metrics.NewDiscard()
	mon, err := pressure.New(pressure.DefaultConfig(), pressure.Deps{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	adm := testkit.Must(message.New(message.Config{}, message.Deps{Snapshot: mon.Snapshot, Metrics: m}))
	if err := adm.Register(class, rule); err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(adm, routes)
	if err != nil {
		t.Fatal(err)
	}
	return tier{m: m, mon: mon, adm: adm, router: router}
}

// allStacks is every goroutine's stack, as runtime.Stack prints them.
func allStacks() []byte {
	buf := make([]byte, 4<<20)
	return buf[:runtime.Stack(buf, true)]
}

// inAwaitInput counts read loops waiting in awaitInput (netconn.go), not
// inside the WebSocket library.
func inAwaitInput() int {
	return bytes.Count(allStacks(), []byte("wsock.(*Conn).AwaitInput("))
}
