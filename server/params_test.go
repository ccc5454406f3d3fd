package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/protocol"
)

// paramMembers lists, for every built-in method, each params member it
// reads and a valid value of it. "T" stands for a topic the caller may
// use; a case variant of a member names one it may not.
var paramMembers = map[string]map[string]string{
	MethodSubscribe:     historyMembersOf(),
	MethodPublish:       historyMembersOf(),
	MethodHistory:       historyMembersOf(),
	MethodUnsubscribe:   {"topic": "T", "data": `1`},
	MethodPresence:      {"topic": "T", "cursor": `""`},
	MethodPresenceStats: {"topic": "T", "cursor": `""`},
	MethodRefresh:       {"token": "TOKEN"},
}

func historyMembersOf() map[string]string {
	return map[string]string{"topic": "T", "data": `1`, "recover": `false`,
		"since": `{"offset":0,"epoch":"e"}`, "idempotencyKey": `"k"`, "limit": `1`}
}

// startExactServer authenticates with testSecret, keeps history on h:*
// and presence on room:*, and forbids h:secret and room:secret.
func startExactServer(t *testing.T) string {
	t.Helper()
	cfg := handshake.DefaultConfig()
	m := metrics.NewDiscard()
	gate, err := handshake.New(cfg, handshake.Deps{Metrics: m, Tokens: testTokens(t)})
	if err != nil {
		t.Fatal(err)
	}
	none := access.Rule{Subscribe: []string{}, Publish: []string{}}
	checker, err := access.New(access.Config{Namespaces: []access.Namespace{
		{Pattern: "room:secret", Rule: none}, {Pattern: "h:secret", Rule: none},
	}}, access.Deps{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	var srv *Server
	o := historyOptions(memoryStore(&srv), history.Policy{Size: 10, TTL: time.Hour})
	o.Gate, o.Metrics, o.Access = gate, m, checker
	o.Bus = bus.NewMemory(bus.NewMemoryBroker(), m)
	o.Presence = PresenceOptions{Mode: roomMode, Config: presence.Config{DiffInterval: 50 * time.Millisecond}}
	srv, url := startServer(t, o)
	return url
}

// Every built-in method reads its params by the one exact rule of
// docs/protocol.md: each member it reads, repeated, answers -32600; a
// case variant of a member is another member, never read in its place.
// The list of methods is the server's own, so a new built-in fails here
// until its members are listed.
func TestEveryBuiltinReadsParamsExactly(t *testing.T) {
	leakcheck.Check(t)
	url := startExactServer(t)
	c := wstest.Dial(t, url+"?token="+wstest.HS256(testSecret, "u"))
	token := wstest.HS256(testSecret, "u")
	okTopic := func(method string) string {
		if method == MethodPresence || method == MethodPresenceStats {
			return "room:ok"
		}
		return "h:ok"
	}
	value := func(method, v string) string {
		switch v {
		case "T":
			return `"` + okTopic(method) + `"`
		case "TOKEN":
			return `"` + token + `"`
		}
		return v
	}
	for _, method := range builtinMethods {
		members, ok := paramMembers[method]
		if !ok {
			t.Fatalf("built-in %q: its params members are not listed here", method)
		}
		base := func() []string {
			var kv []string
			for name, v := range members {
				if name == "topic" || name == "token" || (name == "data" && method == MethodPublish) {
					kv = append(kv, fmt.Sprintf("%q:%s", name, value(method, v)))
				}
			}
			return kv
		}
		for name, v := range members {
			// Repeated: -32600, whatever the values.
			kv := append(base(), fmt.Sprintf("%q:%s", name, value(method, v)), fmt.Sprintf("%q:%s", name, value(method, v)))
			params := "{" + strings.Join(kv, ",") + "}"
			if f := c.Call(method, params); f.Error == nil || f.Error.Code != protocol.CodeInvalidRequest {
				t.Errorf("%s %s: answered %+v %s, want -32600", method, params, f.Error, f.Result)
			}
			// Case variants beside the exact member: not read.
			for _, variant := range []string{strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:]} {
				bad := `"nope"`
				switch name {
				case "topic":
					bad = `"` + strings.Replace(okTopic(method), "ok", "secret", 1) + `"`
				case "token":
					bad = `"` + wstest.HS256("another secret", "u") + `"`
				}
				kv := append(base(), fmt.Sprintf("%q:%s", variant, bad))
				params := "{" + strings.Join(kv, ",") + "}"
				if f := c.Call(method, params); f.Error != nil {
					t.Errorf("%s %s: answered %+v %s, want the exact members' answer", method, params, f.Error, f.Error.Data)
				}
			}
		}
		// Only a case variant of the topic (or token): the member is absent.
		name := "topic"
		if method == MethodRefresh {
			name = "token"
		}
		params := fmt.Sprintf(`{%q:%s}`, strings.ToUpper(name[:1])+name[1:], value(method, members[name]))
		if f := c.Call(method, params); f.Error == nil || f.Error.Code != protocol.CodeInvalidParams {
			t.Errorf("%s %s: answered %+v %s, want -32602", method, params, f.Error, f.Result)
		}
	}
}
