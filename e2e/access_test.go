package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/internal/jwttest"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

const grantSecret = "grant-test-secret-of-enough-length"

// grantBackend is a proxy grant backend: room:open is allowed to alice
// only, room:500 answers 500, room:html answers HTML, room:slow never
// answers before the server's timeout (1s: long enough that the other
// answers never reach it on a busy machine).
type grantBackend struct {
	*httptest.Server
	requests atomic.Int64
	release  chan struct{}
	once     sync.Once
}

// stop lets slow handlers return and closes the backend.
func (b *grantBackend) stop() {
	b.once.Do(func() { close(b.release) })
	b.Close()
}

func newGrantBackend(t *testing.T) *grantBackend {
	b := &grantBackend{release: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		var q struct {
			Action, Topic, User, ClientIP string
			ConnID                        uint64
		}
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil || q.ClientIP != "127.0.0.1" || q.ConnID == 0 {
			t.Errorf("backend question %+v (%v)", q, err)
		}
		switch q.Topic {
		case "room:500":
			w.WriteHeader(http.StatusInternalServerError)
		case "room:html":
			io.WriteString(w, "<html>")
		case "room:slow":
			<-b.release
		default:
			fmt.Fprintf(w, `{"allow":%v}`, q.Topic == "room:open" && q.User == "alice")
		}
	}))
	t.Cleanup(b.stop)
	return b
}

// grantConfig is the grants under test; with auth, every connection has
// a user (a token is required), so anonymous clients are tested on a
// second server without auth.
func grantConfig(backendURL, fail string, auth bool) string {
	secret := ""
	if auth {
		secret = grantSecret
	}
	return fmt.Sprintf(`auth: {jwt: {hmacSecret: %q}}
handshake: {perTickBudget: 0}
topics:
  namespaces:
    - {pattern: "user:{user}", subscribe: [owner], publish: []}
    - {pattern: "chat:*", subscribe: [authenticated], publish: [claim]}
    - {pattern: "room:*", subscribe: [proxy], publish: [authenticated, proxy]}
    - {pattern: "news:*", subscribe: [any], publish: []}
  default: {subscribe: [any], publish: [authenticated]}
  proxy: {url: %q, timeout: 1s, fail: %s}
admission:
  classes: {chatty: {rate: {limit: 2, per: 1h, by: user}}}
  methods: {publish: chatty}
`, secret, backendURL, fail)
}

func grantToken(t *testing.T, user string, topics any) string {
	claims := jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}
	if topics != nil {
		claims["topics"] = topics
	}
	return jwttest.Sign(t, jwt.SigningMethodHS256, []byte(grantSecret), "", claims)
}

func dialAs(t *testing.T, p *proc, tok string) *wstest.Conn {
	t.Helper()
	if tok == "" {
		return wstest.Dial(t, p.WS())
	}
	return wstest.Dial(t, p.WS()+"?token="+tok)
}

// expectCode calls method on topic and checks the answer: 0 = success;
// -32003 and -32005 must carry data {"topic": T}.
func expectCode(t *testing.T, c *wstest.Conn, who, method, topic string, want int) {
	t.Helper()
	params := `{"topic":"` + topic + `"}`
	if method == "publish" {
		params = `{"topic":"` + topic + `","data":1}`
	}
	f := c.Call(method, params)
	got := 0
	if f.Error != nil {
		got = f.Error.Code
	}
	if got != want {
		t.Fatalf("%s %s %s: code %d, want %d (%+v)", who, method, topic, got, want, f.Error)
	}
	if want == protocol.CodeForbidden || want == protocol.CodeUpstream {
		var d protocol.TopicData
		if err := json.Unmarshal(f.Error.Data, &d); err != nil || d.Topic != topic {
			t.Fatalf("%s %s %s: data %s, want {\"topic\":%q}", who, method, topic, f.Error.Data, topic)
		}
	}
}

// Every grant allows and denies as docs/access-control.md says, through
// the built binary: owner, authenticated, claim, proxy (allow, deny, and
// each failure under fail: closed), any, the default, and the reserved
// prefix. A refused publish spends no rate budget, and granted traffic is
// delivered.
func TestTopicGrantsThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	b := newGrantBackend(t)
	p := start(t, grantConfig(b.URL, "closed", true))
	open := start(t, grantConfig(b.URL, "closed", false))
	anon := dialAs(t, open, "")
	alice := dialAs(t, p, grantToken(t, "alice", map[string]any{"publish": []string{"chat:team-*"}}))
	bob := dialAs(t, p, grantToken(t, "bob", nil))
	const ok, forbidden, upstream = 0, protocol.CodeForbidden, protocol.CodeUpstream
	steps := []struct {
		c      *wstest.Conn
		who    string
		method string
		topic  string
		want   int
	}{
		// owner: private user topics.
		{alice, "alice", "subscribe", "user:alice", ok},
		{bob, "bob", "subscribe", "user:alice", forbidden}, // decided by user:{user}: not his
		{anon, "anon", "subscribe", "user:alice", forbidden},
		{alice, "alice", "publish", "user:alice", forbidden}, // publish: [] is nobody
		// authenticated and claim.
		{anon, "anon", "subscribe", "chat:team-1", forbidden},
		{bob, "bob", "subscribe", "chat:team-1", ok},
		{bob, "bob", "publish", "chat:team-1", forbidden},    // no claim
		{alice, "alice", "publish", "chat:lobby", forbidden}, // claim does not match
		// any, and nobody.
		{anon, "anon", "subscribe", "news:today", ok},
		{alice, "alice", "publish", "news:today", forbidden},
		// The default.
		{anon, "anon", "subscribe", "misc", ok},
		{anon, "anon", "publish", "misc", forbidden},
		// proxy: the backend decides; failures answer -32005 under fail: closed.
		{alice, "alice", "subscribe", "room:open", ok},
		{bob, "bob", "subscribe", "room:open", forbidden},
		{anon, "anon", "subscribe", "room:500", upstream},
		{anon, "anon", "subscribe", "room:html", upstream},
		{anon, "anon", "subscribe", "room:slow", upstream},
		{anon, "anon", "publish", "room:open", forbidden}, // authenticated fails, then the backend says no
		// Reserved topics are refused before any grant.
		{alice, "alice", "subscribe", "__system", protocol.CodeInvalidParams},
	}
	denied := map[string]int{}
	for _, s := range steps {
		expectCode(t, s.c, s.who, s.method, s.topic, s.want)
		if s.want == forbidden {
			denied[s.method]++
		}
	}
	// Bob's refused publishes above spent none of his 2 per hour.
	expectCode(t, bob, "bob", "publish", "misc", ok)
	expectCode(t, bob, "bob", "publish", "misc", ok)
	expectCode(t, bob, "bob", "publish", "misc", protocol.CodeRateLimited)
	// Granted traffic flows: alice publishes on her claimed topic to bob.
	expectCode(t, alice, "alice", "publish", "chat:team-1", ok)
	if got := bob.ExpectMessage("chat:team-1"); got != "1" {
		t.Fatalf("bob got %s", got)
	}

	m, mo := p.metrics(), open.metrics()
	for action, n := range denied {
		if got := m[`topic_denied_total{action="`+action+`"}`] + mo[`topic_denied_total{action="`+action+`"}`]; got != float64(n) {
			t.Errorf("topic_denied_total{action=%q} = %v, want %d", action, got, n)
		}
	}
	for reason, n := range map[string]float64{"status": 1, "bad_response": 1, "timeout": 1, "transport": 0} {
		if got := mo[`topic_proxy_errors_total{reason="`+reason+`"}`]; got != n {
			t.Errorf("topic_proxy_errors_total{reason=%q} = %v, want %v", reason, got, n)
		}
	}
}

// The private-topics recipe of docs/access-control.md followed by a broad
// namespace: a {user} pattern decides every topic of its shape whoever
// asks, so another user's topic is refused there and never reaches the
// broad namespace (which, in the old reading, let every signed-in user
// read everyone's private topic), and a user whose id holds the
// pattern's separator owns no topic.
func TestUserTopicsNeverFallThroughThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, fmt.Sprintf(`auth: {jwt: {hmacSecret: %q}}
handshake: {perTickBudget: 0}
topics:
  namespaces:
    - {pattern: "user:{user}", subscribe: [owner], publish: []}
    - {pattern: "*:*", subscribe: [authenticated], publish: []}
  default: {subscribe: [any], publish: []}
`, grantSecret))
	alice := dialAs(t, p, grantToken(t, "alice", nil))
	mallory := dialAs(t, p, grantToken(t, "mallory", nil))
	colon := dialAs(t, p, grantToken(t, "a:b", nil))
	const ok, forbidden = 0, protocol.CodeForbidden
	for _, s := range []struct {
		c     *wstest.Conn
		who   string
		topic string
		want  int
	}{
		{alice, "alice", "user:alice", ok},
		{mallory, "mallory", "user:alice", forbidden},
		{colon, "a:b", "user:a:b", forbidden}, // holds the separator: owns nothing
		{mallory, "mallory", "user:a:b", forbidden},
		{colon, "a:b", "user:a", forbidden},
		{mallory, "mallory", "chat:lobby", ok}, // the broad namespace still serves its own topics
	} {
		expectCode(t, s.c, s.who, "subscribe", s.topic, s.want)
	}
}

// Under fail: open a failing backend allows; answers are still obeyed.
func TestTopicProxyFailOpenThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	b := newGrantBackend(t)
	p := start(t, grantConfig(b.URL, "open", false))
	anon := dialAs(t, p, "")
	for _, topic := range []string{"room:500", "room:html", "room:slow"} {
		expectCode(t, anon, "anon", "subscribe", topic, 0)
	}
	expectCode(t, anon, "anon", "subscribe", "room:open", protocol.CodeForbidden)
	// A dead backend is a transport failure: allowed as well.
	b.stop()
	expectCode(t, anon, "anon", "subscribe", "room:other", 0)
	if got := p.metric(`topic_proxy_errors_total{reason="transport"}`); got != 1 {
		t.Errorf("transport errors = %v, want 1", got)
	}
}

// A validly signed token whose topics claim has the wrong shape is
// refused with 401 and one warning naming the claim.
func TestTopicsClaimOfWrongShapeThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, grantConfig("http://127.0.0.1:9/grant", "closed", true))
	for _, bad := range []any{"chat:*", []string{"chat:*"}, map[string]any{"publish": "chat:*"}, map[string]any{"publish": []string{"chat:["}}} {
		if _, status := dialToken(t, p.WS(), grantToken(t, "mallory", bad)); status != http.StatusUnauthorized {
			t.Errorf("topics claim %v: status %d, want 401", bad, status)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the claim warning", func() bool { return strings.Contains(p.log.String(), "topics claim has the wrong shape") })
	if got := p.metric(`handshake_rejected_total{reason="auth"}`); got != 4 {
		t.Errorf("auth rejections = %v, want 4", got)
	}
	// The server is undisturbed: a good token still connects and works.
	c := dialAs(t, p, grantToken(t, "alice", map[string]any{"subscribe": []string{"x"}}))
	expectCode(t, c, "alice", "subscribe", "misc", 0)
}

// Invalid topics configuration stops start-up with the key named.
func TestTopicsConfigErrorsThroughBinary(t *testing.T) {
	for _, tt := range []struct{ config, key string }{
		{"topics:\n  namespaces:\n    - {pattern: a}\n    - {pattern: b}\n    - {pattern: \"chat:[\", subscribe: [any]}\n", "topics.namespaces[2].pattern"},
		{"topics:\n  namespaces:\n    - {pattern: \"a:*\", subscribe: [owner]}\n", "topics.namespaces[0].subscribe[0]"},
		{"topics:\n  default: {publish: [everyone]}\n", "topics.default.publish[0]"},
		{"topics:\n  default: {publish: [proxy]}\n", "topics.default.publish[0]"},
	} {
		p := startNoWait(t, tt.config)
		if code := p.exitCode(30 * time.Second); code != 2 {
			t.Errorf("%q: exit %d, want 2", tt.config, code)
		}
		if !strings.Contains(p.log.String(), "config: "+tt.key+":") {
			t.Errorf("%q: output does not name %s:\n%s", tt.config, tt.key, p.log.String())
		}
	}
}

// One warning line when anyone may publish and the server listens beyond
// loopback; none on loopback, none when publishing needs a user.
func TestOpenPublishWarning(t *testing.T) {
	leakcheck.Check(t)
	const warning = "may publish on some topics while the server listens beyond loopback"
	wide := startWide(t, "")
	testkit.Eventually(t, 10*time.Second, "the warning", func() bool { return strings.Contains(wide.log.String(), warning) })
	if n := strings.Count(wide.log.String(), warning); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
	for _, cfg := range []string{"", "topics: {default: {publish: [authenticated]}}\n"} {
		p := start(t, cfg)
		if cfg != "" {
			p = startWide(t, cfg)
		}
		if strings.Contains(p.log.String(), warning) {
			t.Errorf("%s %q: unexpected warning", p.Addr, cfg)
		}
	}
}

// startWide starts rtserver on this host's first non-loopback IPv4
// address (a specific address: a wildcard bind would collide with any
// socket using the probed port, client sockets included). Skips the test
// on a host with no such address.
func startWide(t *testing.T, cfg string) *proc {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
			continue
		}
		l, err := net.Listen("tcp", ipn.IP.String()+":0")
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		p := startAt(t, addr, cfg)
		p.waitReady()
		return p
	}
	t.Skip("no non-loopback IPv4 address to listen on")
	return nil
}
