package server

import (
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

const testSecret = "control-test-secret"

// testTokens verifies HS256 tokens signed with testSecret.
func testTokens(t *testing.T) *handshake.Verifier {
	t.Helper()
	v, err := handshake.NewVerifier(handshake.JWT{HMACSecret: []byte(testSecret)}, handshake.VerifierDeps{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// startAuthServer runs a server that authenticates with testSecret, on
// broker (as one instance of a fleet).
func startAuthServer(t *testing.T, broker *bus.MemoryBroker) (*Server, string) {
	t.Helper()
	cfg := handshake.DefaultConfig()
	m := metrics.NewDiscard()
	gate, err := handshake.New(cfg, handshake.Deps{Metrics: m, Tokens: testTokens(t)})
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, Deps{Gate: gate, Bus: bus.NewMemory(broker, m), Metrics: m})
}

func dialAs(t *testing.T, url, user string) *wstest.Conn {
	return wstest.Dial(t, url+"?token="+wstest.HS256(testSecret, user))
}

// nothingFor proves c received nothing before the answer to a request it
// sends now: frames arrive in order.
func nothingFor(t *testing.T, c *wstest.Conn, who string) {
	t.Helper()
	c.Send(`{"jsonrpc":"2.0","id":"fence","method":"unsubscribe","params":{"topic":"fence"}}`)
	if f := c.Recv(); string(f.ID) != `"fence"` {
		t.Fatalf("%s received %+v, want nothing before its fence", who, f)
	}
}

func TestUnsubscribeAndDisconnectReachEveryInstance(t *testing.T) {
	leakcheck.Check(t)
	broker := bus.NewMemoryBroker()
	a, urlA := startAuthServer(t, broker)
	b, urlB := startAuthServer(t, broker)

	alice := []*wstest.Conn{dialAs(t, urlA, "alice"), dialAs(t, urlA, "alice"), dialAs(t, urlB, "alice")}
	bob, carol := dialAs(t, urlB, "bob"), dialAs(t, urlA, "carol")
	all := append([]*wstest.Conn{bob, carol}, alice...)
	for _, c := range all {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"room"}`))
	}
	// alice's first connection is also on "side", which she keeps.
	wstest.MustOK(t, alice[0].Call("subscribe", `{"topic":"side"}`))

	// Unsubscribe issued on b reaches alice's connections on a too.
	if err := b.Unsubscribe("alice", "room"); err != nil {
		t.Fatal(err)
	}
	for i, c := range alice {
		f := c.Recv()
		if f.Method != "system" || f.Params.Event != "unsubscribed" || f.Params.Topic != "room" {
			t.Fatalf("alice[%d] got %+v, want the unsubscribed event", i, f)
		}
	}
	if err := a.Publish("room", []byte(`"after"`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*wstest.Conn{bob, carol} {
		if got := c.ExpectMessage("room"); got != `"after"` {
			t.Fatalf("got %s", got)
		}
	}
	for _, c := range alice {
		nothingFor(t, c, "alice after unsubscribe")
	}
	// She may subscribe again (her connection's state is consistent),
	// and a second API unsubscribe on an instance where she is not
	// subscribed sends no event.
	wstest.MustOK(t, alice[2].Call("subscribe", `{"topic":"room"}`))
	if err := a.Publish("room", []byte(`"again"`)); err != nil {
		t.Fatal(err)
	}
	if got := alice[2].ExpectMessage("room"); got != `"again"` {
		t.Fatalf("resubscribed alice got %s", got)
	}
	if err := a.Publish("side", []byte(`"side"`)); err != nil {
		t.Fatal(err)
	}
	if got := alice[0].ExpectMessage("side"); got != `"side"` {
		t.Fatalf("alice lost an unrelated topic: %s", got)
	}
	if n, _ := a.Counts(); n != 3 {
		t.Errorf("a has %d connections, want 3", n)
	}

	// Disconnect issued on a closes alice's connections on b too.
	if err := a.Disconnect("alice"); err != nil {
		t.Fatal(err)
	}
	for i, c := range alice {
		code, reason := c.CloseStatus()
		if code != websocket.StatusPolicyViolation || reason != DisconnectedReason {
			t.Errorf("alice[%d] closed with %d %q, want 1008 disconnected", i, code, reason)
		}
	}
	for _, c := range []*wstest.Conn{bob, carol} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"still-here"}`))
	}
	// The user index forgets alice once her connections are gone.
	for _, s := range []*Server{a, b} {
		// The connections' cleanup runs on their own goroutines.
		testkit.Eventually(t, time.Until(time.Now().Add(10*time.Second)), func() string {
			return "alice is still indexed after her connections closed"
		}, func() bool { return len(s.userConns("alice")) == 0 })
	}
	if err := a.Disconnect(""); err != ErrBadUser {
		t.Errorf("Disconnect(\"\") = %v, want ErrBadUser", err)
	}
	if err := a.Unsubscribe("alice", "__sys"); err == nil {
		t.Error("Unsubscribe from a reserved topic accepted")
	}
}
