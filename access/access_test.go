package access

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/metrics"
)

func TestPatternMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, topic string
		want           bool
	}{
		{"chat:*", "chat:room1", true},
		{"chat:*", "chat:a/b", false}, // path.Match: * stops at /
		{"chat:*/*", "chat:a/b", true},
		{"news", "news", true},
		{"news", "news2", false},
		// A {user} pattern decides its whole shape, whoever asks.
		{"user:{user}", "user:alice", true},
		{"user:{user}", "user:a:b", true}, // its shape, though nobody owns it
		{"user:{user}", "user:", false},
		{"user:{user}", "user:a/b", false},
		{"user:{user}:*", "user:alice:inbox", true},
		{"user:{user}:*", "user:alice", false},
		{"{user}", "alice", true},
		{"{user}", "a/b", false},
	}
	for _, tt := range tests {
		p, err := compilePattern(tt.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tt.pattern, err)
		}
		if got := p.match(tt.topic); got != tt.want {
			t.Errorf("%q.match(%q) = %v, want %v", tt.pattern, tt.topic, got, tt.want)
		}
	}
}

func TestPatternOwner(t *testing.T) {
	t.Parallel()
	const nobody = ""
	tests := []struct {
		pattern, topic, owner string
	}{
		{"user:{user}", "user:alice", "alice"},
		{"user:{user}", "user:a:b", nobody}, // the run would hold the separator ':'
		{"user:{user}", "user:", nobody},
		{"user:{user}", "chat:alice", nobody},
		{"user:{user}:*", "user:alice:inbox", "alice"},
		{"user:{user}:*", "user:alice:", "alice"},
		{"user:{user}:*", "user:a:b:c", "a"}, // never "a:b"
		{"*:{user}", "dm:alice", "alice"},
		{"*:{user}", "dm:x:alice", "alice"}, // * crosses ":", the run does not
		{"*:{user}", "a/b:alice", nobody},
		{"{user}", "alice", "alice"},
		{"a{user}:x", "aaa:x", nobody}, // the run would hold the separator 'a'
		{"a{user}:x", "ab:x", "b"},
		{"dm:*:{user}", "dm:alice:alice", "alice"},
		{"dm:{user}:bob", "dm:alice:bob", "alice"},
		{`user\:{user}`, "user:alice", "alice"},
		{"[ab]:{user}", "a:alice", "alice"},
		// Two different runs fit: nobody owns the topic.
		{"*:{user}:*", ":a:b:", nobody},
		{"*:{user}:*", "x:a:x", "a"},
		{"*:{user}:*", ":a:a:", "a"}, // the same run twice: one owner
	}
	for _, tt := range tests {
		p, err := compilePattern(tt.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tt.pattern, err)
		}
		got, ok := p.owner(tt.topic)
		if !ok {
			got = nobody
		}
		if got != tt.owner {
			t.Errorf("%q.owner(%q) = %q, want %q", tt.pattern, tt.topic, got, tt.owner)
		}
		if ok && !p.match(tt.topic) {
			t.Errorf("%q: %q has an owner but not the pattern's shape", tt.pattern, tt.topic)
		}
		if p.owns(tt.topic, "") {
			t.Errorf("%q: %q owned by an anonymous connection", tt.pattern, tt.topic)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	okFn := func(context.Context, Question) (bool, error) { return true, nil }
	tests := []struct {
		name     string
		cfg      Config
		grants   map[string]GrantFunc // Deps.Grants
		wantKeys []string             // "-": an error that names no key
	}{
		{name: "zero", cfg: Config{}},
		{name: "everything valid", cfg: Config{
			Namespaces: []Namespace{
				{Pattern: "user:{user}", Rule: Rule{Subscribe: []string{"owner"}, Publish: []string{"owner", "claim"}}},
				{Pattern: "chat:*", Rule: Rule{Subscribe: []string{"authenticated", "mine"}, Publish: []string{"proxy"}}},
			},
			Default: &Rule{Subscribe: []string{"any"}},
			Proxy:   Proxy{URL: "http://127.0.0.1:1/grant", Timeout: time.Second},
		}, grants: map[string]GrantFunc{"mine": okFn}},
		{name: "bad glob", cfg: Config{Namespaces: []Namespace{{Pattern: "a"}, {Pattern: "chat:["}}}, wantKeys: []string{"topics.namespaces[1].pattern"}},
		{name: "bad glob after user", cfg: Config{Namespaces: []Namespace{{Pattern: "u:{user}:[z-"}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "empty pattern", cfg: Config{Namespaces: []Namespace{{Pattern: ""}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "two users", cfg: Config{Namespaces: []Namespace{{Pattern: "{user}:{user}"}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "user after a star", cfg: Config{Namespaces: []Namespace{{Pattern: "user*{user}"}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "user before a class", cfg: Config{Namespaces: []Namespace{{Pattern: "u:{user}[ab]"}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "user after a class", cfg: Config{Namespaces: []Namespace{{Pattern: "[ab]{user}"}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "other placeholder", cfg: Config{Namespaces: []Namespace{{Pattern: "room:{id}"}}}, wantKeys: []string{"topics.namespaces[0].pattern"}},
		{name: "unknown grant", cfg: Config{Namespaces: []Namespace{{Pattern: "a", Rule: Rule{Publish: []string{"any", "everyone"}}}}}, wantKeys: []string{"topics.namespaces[0].publish[1]"}},
		{name: "owner without user", cfg: Config{Namespaces: []Namespace{{Pattern: "a:*", Rule: Rule{Subscribe: []string{"owner"}}}}}, wantKeys: []string{"topics.namespaces[0].subscribe[0]"}},
		{name: "owner in default", cfg: Config{Default: &Rule{Publish: []string{"owner"}}}, wantKeys: []string{"topics.default.publish[0]"}},
		{name: "proxy without url", cfg: Config{Default: &Rule{Subscribe: []string{"proxy"}}}, wantKeys: []string{"topics.default.subscribe[0]"}},
		{name: "bad proxy settings", cfg: Config{Proxy: Proxy{URL: "ftp://x", Timeout: -1, CacheTTL: -1}},
			wantKeys: []string{"topics.proxy.url", "topics.proxy.timeout", "topics.proxy.cacheTTL"}},
		{name: "grant shadows a built-in", grants: map[string]GrantFunc{"any": okFn}, wantKeys: []string{"-"}},
		{name: "nil grant", cfg: Config{Default: &Rule{Publish: []string{"x"}}}, grants: map[string]GrantFunc{"x": nil},
			wantKeys: []string{"-", "topics.default.publish[0]"}},
		{name: "application grant unknown to Validate", cfg: Config{Default: &Rule{Publish: []string{"mine"}}}, grants: map[string]GrantFunc{"mine": okFn}},
	}
	for _, tt := range tests {
		err := tt.cfg.validate(tt.grants)
		var keys []string
		if err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					keys = append(keys, "-")
					continue
				}
				keys = append(keys, ce.Key)
			}
		}
		if !slices.Equal(keys, tt.wantKeys) {
			t.Errorf("%s: keys %v, want %v (%v)", tt.name, keys, tt.wantKeys, err)
		}
		if _, nerr := New(tt.cfg, Deps{Grants: tt.grants}); (nerr == nil) != (err == nil) {
			t.Errorf("%s: New error %v, validate %v", tt.name, nerr, err)
		}
		if len(tt.grants) > 0 && tt.cfg.Default != nil && tt.cfg.Validate() == nil {
			t.Errorf("%s: Validate, which knows no application grant, accepts a rule naming one", tt.name)
		}
	}
}

func newChecker(t testing.TB, cfg Config) (*Checker, *metrics.Metrics) {
	t.Helper()
	m := metrics.NewDiscard()
	c, err := New(cfg, Deps{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

func TestBuiltinGrants(t *testing.T) {
	t.Parallel()
	c, m := newChecker(t, Config{
		Namespaces: []Namespace{
			// No "user:*" after it: the {user} namespace decides other
			// users' topics itself.
			{Pattern: "user:{user}", Rule: Rule{Subscribe: []string{"owner"}, Publish: []string{}}},
			{Pattern: "chat:*", Rule: Rule{Subscribe: []string{"authenticated"}, Publish: []string{"claim"}}},
			{Pattern: "open:*", Rule: Rule{Subscribe: []string{"any"}, Publish: []string{"any"}}},
		},
		Default: &Rule{Subscribe: []string{"any"}},
	})
	claim := &handshake.TopicClaim{Subscribe: []string{"x"}, Publish: []string{"chat:room1", "chat:team-*"}}
	tests := []struct {
		action Action
		topic  string
		user   string
		claim  *handshake.TopicClaim
		want   Decision
	}{
		{Subscribe, "user:alice", "alice", nil, Allow},
		{Subscribe, "user:alice", "bob", nil, Deny},
		{Subscribe, "user:alice", "", nil, Deny},
		{Publish, "user:alice", "alice", nil, Deny}, // empty list: nobody
		{Subscribe, "user:a:b", "a:b", nil, Deny},   // a user id holding the separator owns nothing
		{Subscribe, "user:a:b", "", nil, Deny},      // ...and the topic is still decided here
		{Subscribe, "user:a/b", "", nil, Allow},     // not of the shape: the default decides
		{Subscribe, "chat:room1", "bob", nil, Allow},
		{Subscribe, "chat:room1", "", nil, Deny},
		{Publish, "chat:room1", "bob", claim, Allow},
		{Publish, "chat:team-a", "bob", claim, Allow},
		{Publish, "chat:room2", "bob", claim, Deny},
		{Publish, "chat:room1", "bob", nil, Deny},
		{Publish, "chat:room1", "bob", &handshake.TopicClaim{Subscribe: []string{"chat:*"}}, Deny}, // claim for the other action
		{Subscribe, "open:x", "", nil, Allow},
		{Publish, "open:x", "", nil, Allow},
		{Subscribe, "elsewhere", "", nil, Allow}, // default
		{Publish, "elsewhere", "alice", nil, Deny},
		{Subscribe, "__system", "alice", nil, Deny}, // reserved: never granted
		{Publish, "__open:x", "", nil, Deny},
	}
	var denied [2]int
	for _, tt := range tests {
		q := Question{Action: tt.action, Topic: tt.topic, User: tt.user, Claim: tt.claim, ConnID: 7, IP: netip.MustParseAddr("192.0.2.1")}
		if got := c.Check(context.Background(), q); got != tt.want {
			t.Errorf("%v %q by %q (claim %+v) = %v, want %v", tt.action, tt.topic, tt.user, tt.claim, got, tt.want)
		}
		if tt.want == Deny {
			denied[tt.action]++
		}
	}
	for a, n := range denied {
		if got := testutil.ToFloat64(m.TopicDenied.WithLabelValues(Action(a).String())); got != float64(n) {
			t.Errorf("topic_denied_total{action=%q} = %v, want %d", Action(a), got, n)
		}
	}
	// The same denials by the rule that decided: each one counted once,
	// the reserved topics under their own label.
	byNS := make(chan prometheus.Metric, 64)
	m.TopicDeniedNS.Collect(byNS)
	close(byNS)
	sum := 0.0
	for metric := range byNS {
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			t.Fatal(err)
		}
		sum += pb.GetCounter().GetValue()
	}
	if want := float64(denied[0] + denied[1]); sum != want {
		t.Errorf("topic_denied_namespace_total sums to %v, want %v", sum, want)
	}
	if got := testutil.ToFloat64(m.TopicDeniedNS.WithLabelValues(metrics.DeniedByReserved)); got != 2 {
		t.Errorf(`topic_denied_namespace_total{namespace="(reserved)"} = %v, want 2`, got)
	}
	if c.PublishableByAny() != true {
		t.Error("open:* is publishable by any")
	}
}

func TestZeroConfigAllowsAllButReserved(t *testing.T) {
	t.Parallel()
	c, _ := newChecker(t, Config{})
	for _, a := range []Action{Subscribe, Publish} {
		if c.Check(context.Background(), Question{Action: a, Topic: "x"}) != Allow {
			t.Errorf("%v x denied by the zero config", a)
		}
		if c.Check(context.Background(), Question{Action: a, Topic: "__x"}) != Deny {
			t.Errorf("%v __x allowed", a)
		}
	}
	if !c.PublishableByAny() {
		t.Error("the zero config lets anyone publish")
	}
	locked, _ := newChecker(t, Config{Default: &Rule{Subscribe: []string{"any"}, Publish: []string{"authenticated"}}})
	if locked.PublishableByAny() {
		t.Error("publish: [authenticated] reported publishable by any")
	}
}

func TestApplicationGrant(t *testing.T) {
	t.Parallel()
	var asked []string
	m := metrics.NewDiscard()
	c, err := New(Config{
		Namespaces: []Namespace{
			{Pattern: "room:*", Rule: Rule{Subscribe: []string{"member"}, Publish: []string{"flaky", "member"}}},
			{Pattern: "boom:*", Rule: Rule{Subscribe: []string{"panics"}, Publish: []string{"authenticated", "panics"}}},
		},
	}, Deps{Metrics: m, Grants: map[string]GrantFunc{
		"member": func(_ context.Context, q Question) (bool, error) {
			asked = append(asked, q.Action.String()+" "+q.Topic+" "+q.User)
			return q.User == "alice" && strings.HasSuffix(q.Topic, ":1"), nil
		},
		"flaky":  func(context.Context, Question) (bool, error) { return false, errors.New("db down") },
		"panics": func(context.Context, Question) (bool, error) { panic("bug") },
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(a Action, topic, user string) Decision {
		return c.Check(ctx, Question{Action: a, Topic: topic, User: user})
	}
	if d := check(Subscribe, "room:1", "alice"); d != Allow {
		t.Errorf("member alice room:1 = %v", d)
	}
	if d := check(Subscribe, "room:2", "alice"); d != Deny {
		t.Errorf("member alice room:2 = %v", d)
	}
	// An erring grant does not stop the next one from allowing...
	if d := check(Publish, "room:1", "alice"); d != Allow {
		t.Errorf("flaky then member = %v", d)
	}
	// ...and when nothing allows, the failure answers Unavailable, not Deny.
	if d := check(Publish, "room:2", "alice"); d != Unavailable {
		t.Errorf("flaky then member refusing = %v, want unavailable", d)
	}
	if d := check(Subscribe, "boom:1", "alice"); d != Unavailable {
		t.Errorf("panicking grant = %v, want unavailable", d)
	}
	if d := check(Publish, "boom:1", "alice"); d != Allow {
		t.Errorf("authenticated before a panicking grant = %v", d)
	}
	want := []string{"subscribe room:1 alice", "subscribe room:2 alice", "publish room:1 alice", "publish room:2 alice"}
	if !slices.Equal(asked, want) {
		t.Errorf("member asked %v, want %v", asked, want)
	}
	if got := testutil.ToFloat64(m.TopicDenied.WithLabelValues("subscribe")); got != 1 {
		t.Errorf("denied subscribe = %v, want 1 (unavailable is not a denial)", got)
	}
}

// The built-in grants and a cached proxy answer allocate nothing: the
// budget of docs/access-control.md, kept as a count rather than a timing.
func TestCheckDoesNotAllocate(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, _ question) { io.WriteString(w, `{"allow":true}`) })
	c, _ := newChecker(t, Config{
		Namespaces: []Namespace{
			{Pattern: "user:{user}", Rule: Rule{Subscribe: []string{"owner"}}},
			{Pattern: "chat:*", Rule: Rule{Subscribe: []string{"authenticated"}, Publish: []string{"claim"}}},
			{Pattern: "room:*", Rule: Rule{Publish: []string{"proxy"}}},
		},
		Default: &Rule{Subscribe: []string{"any"}},
		Proxy:   Proxy{URL: b.URL, Timeout: time.Minute, CacheTTL: time.Hour},
	})
	claim := &handshake.TopicClaim{Publish: []string{"chat:x-*", "chat:r?om"}}
	ctx := context.Background()
	for _, q := range []Question{
		{Action: Subscribe, Topic: "news"},
		{Action: Subscribe, Topic: "chat:a", User: "u"},
		{Action: Subscribe, Topic: "user:u", User: "u"},
		{Action: Publish, Topic: "chat:room", User: "u", Claim: claim},
		{Action: Publish, Topic: "room:1", User: "u"},
	} {
		if c.Check(ctx, q) != Allow {
			t.Fatalf("%+v not allowed", q)
		}
		if n := testing.AllocsPerRun(100, func() { c.Check(ctx, q) }); n != 0 {
			t.Errorf("%v %s: %v allocs per check", q.Action, q.Topic, n)
		}
	}
}

// TestPresenceByShape: what a topic keeps is decided by the first
// namespace with the topic's shape, whoever asks ({user} stands for any
// one run without '/'), else by the default.
func TestPresenceByShape(t *testing.T) {
	c, err := New(Config{
		Namespaces: []Namespace{
			{Pattern: "user:{user}", Rule: Rule{Subscribe: []string{GrantOwner}, Presence: true}},
			{Pattern: "room:*", Rule: Rule{Subscribe: []string{GrantAny}, Presence: true, JoinLeave: true}},
			{Pattern: "quiet:*", Rule: Rule{Subscribe: []string{GrantAny}}},
		},
		Default: &Rule{Subscribe: []string{GrantAny}, JoinLeave: true},
	}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.KeepsPresence() {
		t.Fatal("KeepsPresence false")
	}
	for _, tt := range []struct {
		give                string
		presence, joinLeave bool
	}{
		{"user:alice", true, false},
		{"user:a/b", false, true}, // not the shape: the default decides
		{"room:1", true, true},
		{"quiet:1", false, false},
		{"other", false, true},
		{"__room:1", false, false},
	} {
		p, jl := c.Presence(tt.give)
		if p != tt.presence || jl != tt.joinLeave {
			t.Errorf("Presence(%q) = %v, %v; want %v, %v", tt.give, p, jl, tt.presence, tt.joinLeave)
		}
	}
	plain, _ := New(Config{}, Deps{})
	if plain.KeepsPresence() {
		t.Error("the zero Config keeps presence")
	}
}

func TestHistoryPolicyByShape(t *testing.T) {
	room := history.Policy{Size: 10, TTL: time.Minute}
	c, err := New(Config{
		Namespaces: []Namespace{
			{Pattern: "inbox:{user}", Rule: Rule{Subscribe: []string{GrantOwner}, History: room}},
			{Pattern: "room:*", Rule: Rule{Subscribe: []string{GrantAny}, History: room}},
			{Pattern: "news", Rule: Rule{Subscribe: []string{GrantAny}}},
		},
	}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]history.Policy{"room:1": room, "inbox:alice": room, "news": {}, "other": {}, "__x": {}} {
		if got := c.HistoryOf(topic); got != want {
			t.Errorf("HistoryOf(%q) = %+v, want %+v", topic, got, want)
		}
	}
	if !c.KeepsHistory() {
		t.Error("KeepsHistory false")
	}
	_, err = New(Config{Namespaces: []Namespace{{Pattern: "a", Rule: Rule{History: history.Policy{Size: 1}}}}}, Deps{})
	if err == nil || !strings.Contains(err.Error(), "topics.namespaces[0].history") {
		t.Fatalf("size without ttl: %v", err)
	}
}

// A namespace that leaves a list out closes that action to every client,
// as an empty list does; New says so once at start-up, naming the key,
// and says nothing about a list written empty.
func TestOmittedListWarns(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := Config{
		Namespaces: []Namespace{
			{Pattern: "news:*", Rule: Rule{Subscribe: []string{GrantAny}}},                             // publish left out
			{Pattern: "user:{user}", Rule: Rule{Subscribe: []string{GrantOwner}, Publish: []string{}}}, // written empty
		},
		Default: &Rule{Publish: []string{GrantAuthenticated}}, // subscribe left out
	}
	c, err := New(cfg, Deps{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		`topics.namespaces[0] has no publish list: no client may publish on its topics`,
		`key=topics.namespaces[0].publish pattern=news:*`,
		`topics.default has no subscribe list: no client may subscribe`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Errorf("%d warnings, want 2 (none for a list written empty):\n%s", n, out)
	}
	// What the warning says is what the checker does.
	if c.Check(context.Background(), Question{Action: Publish, Topic: "news:today", User: "alice"}) != Deny {
		t.Error("publish on a namespace without a publish list was allowed")
	}
}
