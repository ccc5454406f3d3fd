package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/testnode"
	"github.com/rtserver/rtserver/protocol"
)

const toolSecret = "tools-test-secret-0123456789abcdef"

// runCmd runs the binary's entry point and returns its exit code and
// outputs.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut testkit.LogBuffer
	code := run(args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The subcommands work against a started node with nothing but the
// config file: a token made by token passes checktoken and the
// handshake, sub prints what pub publishes as JSON lines.
func TestSubcommandsAgainstANode(t *testing.T) {
	leakcheck.Check(t)
	cfg := rtserver.DefaultConfig()
	cfg.Auth.JWT.HMACSecret = []byte(toolSecret)
	cfg.Auth.JWT.Audience = "rt"
	_, addr := testnode.Start(t, cfg, rtserver.Deps{})
	file := filepath.Join(t.TempDir(), "rt.yaml")
	yaml := "listen: " + addr + "\nauth: {jwt: {hmacSecret: " + toolSecret + ", audience: rt}}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	code, tok, stderr := runCmd(t, "token", "--config", file, "--user", "alice", "--ttl", "1h")
	tok = strings.TrimSpace(tok)
	if code != 0 || strings.Count(tok, ".") != 2 {
		t.Fatalf("token: exit %d, %q, %q", code, tok, stderr)
	}
	code, out, stderr := runCmd(t, "checktoken", "--config", file, tok)
	if code != 0 || !strings.HasPrefix(out, "ok: user alice, expires ") {
		t.Fatalf("checktoken: exit %d, %q, %q", code, out, stderr)
	}
	_, old, _ := runCmd(t, "token", "--config", file, "--user", "alice", "--ttl", "-1h")
	code, _, stderr = runCmd(t, "checktoken", "--config", file, strings.TrimSpace(old))
	if code != 1 || !strings.Contains(stderr, "refused (expired): token expired") {
		t.Fatalf("checktoken of an expired token: exit %d, %q", code, stderr)
	}

	var subOut, subErr testkit.LogBuffer
	subDone := make(chan int, 1)
	go func() {
		subDone <- run([]string{"sub", "--config", file, "--token", tok, "--count", "2", "room:1"}, nil, &subOut, &subErr)
	}()
	testkit.Eventually(t, 10*time.Second, "sub subscribed", func() bool {
		return strings.Contains(subErr.String(), "subscribed to room:1")
	})
	if code, _, stderr := runCmd(t, "pub", "--config", file, "--user", "bob", "room:1", `{"text":"hi"}`); code != 0 {
		t.Fatalf("pub: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "pub", "--config", file, "--user", "bob", "room:1", "plain words"); code != 0 {
		t.Fatalf("pub: exit %d, %q", code, stderr)
	}
	if code := <-subDone; code != 0 {
		t.Fatalf("sub: exit %d, %q", code, subErr.String())
	}
	want := "{\"topic\":\"room:1\",\"data\":{\"text\":\"hi\"}}\n{\"topic\":\"room:1\",\"data\":\"plain words\"}\n"
	if subOut.String() != want {
		t.Fatalf("sub printed %q, want %q", subOut.String(), want)
	}

	// Without a token the server's refusal reaches the user.
	code, _, stderr = runCmd(t, "pub", "--config", file, "room:1", "1")
	if code != 1 || !strings.Contains(stderr, "HTTP 401 (unauthorized: no token") {
		t.Fatalf("pub without a token: exit %d, %q", code, stderr)
	}
}

// A refusal names the call and topic, keeps the JSON-RPC error reachable,
// and says where a -32003's reason is found; other errors pass unchanged.
func TestRefusalNamesTheCallAndWhereToLook(t *testing.T) {
	if refusal("publish", "room:1", nil) != nil {
		t.Fatal("no error became an error")
	}
	plain := errors.New("dial: connection refused")
	if got := refusal("publish", "room:1", plain); got != plain {
		t.Fatalf("a transport error was rewritten: %v", got)
	}
	err := refusal("subscribe", "user:bob", protocol.NewError(protocol.CodeForbidden, "", nil))
	var rpc *protocol.Error
	if !errors.As(err, &rpc) || rpc.Code != protocol.CodeForbidden {
		t.Fatalf("the JSON-RPC error is lost: %v", err)
	}
	for _, want := range []string{"subscribe user:bob refused", "-32003", "docs/access-control.md", "--log-level debug"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// Each slip a newcomer makes on the command line is answered with what to
// do instead, before anything is dialled.
func TestToolMistakesSayWhatToDo(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.yaml")
	if err := os.WriteFile(secret, []byte("auth: {jwt: {hmacSecret: "+toolSecret+"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bogus"}, 2, `unknown subcommand "bogus": the subcommands are token, checktoken, sub, pub`},
		{[]string{"pub", "room:1", "hello", "--user", "bob"}, 1, "--user after the arguments: flags go before them (rtserver pub [flags] TOPIC [DATA])"},
		{[]string{"pub", "room:1"}, 1, "want TOPIC [DATA], got 1 arguments (rtserver pub --help)"},
		{[]string{"pub", "--user", "bob", "room:1", "hello"}, 1, "rtserver pub: --user needs auth.jwt.hmacSecret in the config to sign a token"},
		{[]string{"token", "--user", "bob"}, 1, "rtserver token: --user needs auth.jwt.hmacSecret in the config to sign a token"},
		{[]string{"token", "--config", secret}, 1, "rtserver token: --user is required"},
		{[]string{"token", "--config", secret, "--user", "alice\nX-Admin: 1"}, 1, "rtserver token: --user must be 1 to 1024 bytes of UTF-8 without control characters"},
		{[]string{"token", "--config", secret, "--user", strings.Repeat("u", 1025)}, 1, "rtserver token: --user must be 1 to 1024 bytes"},
		{[]string{"sub", "--count", "-1", "room:1"}, 1, "rtserver sub: --count -1: want 0 (run until interrupted) or a number of messages"},
		{[]string{"sub", "--config", secret, "--user", "bob", "--token", "T", "room:1"}, 1, "--user and --token are both set: give one"},
		{[]string{"sub", "--since", "nocolon", "room:1"}, 2, "want EPOCH:OFFSET"},
	} {
		code, _, stderr := runCmd(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("rtserver %q: exit %d, %q; want exit %d saying %q", c.args, code, stderr, c.code, c.want)
		}
	}

	// Each subcommand's help lists its own flags, no one else's.
	for _, c := range []struct {
		name        string
		has, hasNot []string
	}{
		{"token", []string{"-user", "-ttl", "-config"}, []string{"-token", "-url", "-count", "-since"}},
		{"checktoken", []string{"-config"}, []string{"-user", "-token", "-ttl", "-url", "-count", "-since"}},
		{"sub", []string{"-user", "-token", "-url", "-count", "-since"}, nil},
		{"pub", []string{"-user", "-token", "-url"}, []string{"-count", "-since"}},
		{"presence", []string{"-user", "-token", "-url", "-count", "-since"}, nil},
		{"history", []string{"-user", "-token", "-url", "-count", "-since"}, nil},
	} {
		code, help, _ := runCmd(t, c.name, "--help")
		if code != 0 || !strings.HasPrefix(help, "Usage: rtserver "+c.name+" [flags]") {
			t.Errorf("%s --help: exit %d, %q", c.name, code, help)
		}
		for _, f := range c.has {
			if !strings.Contains(help, "  "+f+" ") {
				t.Errorf("%s --help does not list %s:\n%s", c.name, f, help)
			}
		}
		for _, f := range c.hasNot {
			if strings.Contains(help, "  "+f+" ") {
				t.Errorf("%s --help lists %s, which it does not take:\n%s", c.name, f, help)
			}
		}
	}

	code, out, stderr := runCmd(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "rtserver ") || !strings.Contains(out, " go1.") {
		t.Errorf("--version: exit %d, %q, %q", code, out, stderr)
	}
}

// On a history topic pub prints the position, sub prints offsets and
// starts after --since, and sub rides out a drain: it reconnects to the
// server that takes the address over and recovers what it missed, so each
// offset is printed once, in order.
func TestSubRecoversAcrossADrain(t *testing.T) {
	leakcheck.Check(t)
	rd := redistest.Start(t)
	addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	file := filepath.Join(t.TempDir(), "rt.yaml")
	yaml := "listen: " + addr + "\nredis: {url: " + rd.URL() + "}\ndrain: {duration: 100ms}\n" +
		"topics:\n  namespaces:\n    - {pattern: \"room:*\", subscribe: [any], publish: [any], history: {size: 100, ttl: 5m}}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve := func() (stop func()) {
		node, err := rtserver.New(cfg, rtserver.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- node.Serve(ln) }()
		var once sync.Once
		stop = func() {
			once.Do(func() {
				if err := node.Shutdown(context.Background()); err != nil {
					t.Errorf("shutdown: %v", err)
				}
				<-done
			})
		}
		t.Cleanup(stop)
		return stop
	}
	pub := func(data string) client.Position {
		t.Helper()
		code, out, stderr := runCmd(t, "pub", "--config", file, "room:1", data)
		var pos client.Position
		if code != 0 || json.Unmarshal([]byte(out), &pos) != nil || pos.Epoch == "" {
			t.Fatalf("pub %s: exit %d, %q, %q", data, code, out, stderr)
		}
		return pos
	}

	stopFirst := serve()
	first := pub("one")
	if second := pub("two"); first.Offset != 1 || second != (client.Position{Epoch: first.Epoch, Offset: 2}) {
		t.Fatalf("positions %v, %v", first, second)
	}
	var subOut, subErr testkit.LogBuffer
	subDone := make(chan int, 1)
	go func() {
		since := first.Epoch + ":1"
		subDone <- run([]string{"sub", "--config", file, "--since", since, "--count", "3", "room:1"}, nil, &subOut, &subErr)
	}()
	testkit.Eventually(t, 10*time.Second, "sub subscribed", func() bool {
		return strings.Contains(subErr.String(), "subscribed to room:1")
	})
	stopFirst()
	testkit.Eventually(t, 10*time.Second, "sub told of the drain", func() bool {
		return strings.Contains(subErr.String(), "disconnected")
	})
	serve()
	pub("three")
	pub("four")
	if code := <-subDone; code != 0 {
		t.Fatalf("sub: exit %d, %q", code, subErr.String())
	}
	want := `{"topic":"room:1","offset":2,"data":"two"}
{"topic":"room:1","offset":3,"data":"three"}
{"topic":"room:1","offset":4,"data":"four"}
`
	if subOut.String() != want {
		t.Fatalf("sub printed %q, want %q (stderr %q)", subOut.String(), want, subErr.String())
	}
	// "reconnected" comes before what the new connection recovered, even
	// when the recovered messages alone reach --count.
	if e := subErr.String(); !strings.Contains(e, "reconnected\nrecovered room:1") {
		t.Errorf("sub did not say it reconnected before recovering: %q", e)
	}
}

// presence and history take sub's flags: presence lists who is in a topic
// as JSON lines (--count stops early, --since is refused: presence has no
// position), history prints stored messages as sub does, the newest
// --count or those after --since, and the position on stderr.
func TestPresenceAndHistorySubcommands(t *testing.T) {
	leakcheck.Check(t)
	cfg := rtserver.DefaultConfig()
	cfg.Auth.JWT.HMACSecret = []byte(toolSecret)
	cfg.Topics.Namespaces = []access.Namespace{{Pattern: "room:*", Rule: access.Rule{
		Subscribe: []string{access.GrantAny}, Publish: []string{access.GrantAny},
		Presence: true, History: history.Policy{Size: 100, TTL: time.Minute},
	}}}
	_, addr := testnode.Start(t, cfg, rtserver.Deps{})
	file := filepath.Join(t.TempDir(), "rt.yaml")
	if err := os.WriteFile(file, []byte("listen: "+addr+"\nauth: {jwt: {hmacSecret: "+toolSecret+"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, user := range []string{"alice", "bob"} {
		tok, err := cfg.Auth.JWT.SignHMAC(user, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.Dial(ctx, "ws://"+addr+"/ws", &client.Options{Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Subscribe(ctx, "room:1", func(string, json.RawMessage) {}); err != nil {
			t.Fatal(err)
		}
	}

	code, out, stderr := runCmd(t, "presence", "--config", file, "--user", "carol", "room:1")
	if code != 0 || !strings.Contains(out, `"user":"alice"`) || !strings.Contains(out, `"user":"bob"`) || strings.Count(out, "\n") != 2 {
		t.Fatalf("presence: exit %d, %q, %q", code, out, stderr)
	}
	if stderr != "room:1: 2 connections, 2 users\n" {
		t.Fatalf("presence stderr %q", stderr)
	}
	if code, out, _ := runCmd(t, "presence", "--config", file, "--user", "carol", "--count", "1", "room:1"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("presence --count 1: exit %d, %q", code, out)
	}
	if code, _, stderr := runCmd(t, "presence", "--config", file, "--user", "carol", "--since", "e:1", "room:1"); code != 1 || !strings.Contains(stderr, "presence has none") {
		t.Fatalf("presence --since: exit %d, %q", code, stderr)
	}

	var first client.Position
	for i, data := range []string{"one", "two", "three"} {
		code, out, stderr := runCmd(t, "pub", "--config", file, "--user", "carol", "room:1", data)
		if code != 0 {
			t.Fatalf("pub: exit %d, %q", code, stderr)
		}
		if i == 0 {
			json.Unmarshal([]byte(out), &first)
		}
	}
	code, out, stderr = runCmd(t, "history", "--config", file, "--user", "carol", "--count", "2", "room:1")
	want := `{"topic":"room:1","offset":2,"data":"two"}
{"topic":"room:1","offset":3,"data":"three"}
`
	if code != 0 || out != want || stderr != `position: {"epoch":"`+first.Epoch+`","offset":3}`+"\n" {
		t.Fatalf("history --count 2: exit %d, %q, %q; want %q", code, out, stderr, want)
	}
	code, out, _ = runCmd(t, "history", "--config", file, "--user", "carol", "--since", first.Epoch+":2", "room:1")
	if code != 0 || out != `{"topic":"room:1","offset":3,"data":"three"}`+"\n" {
		t.Fatalf("history --since: exit %d, %q", code, out)
	}
	if code, _, stderr := runCmd(t, "history", "--config", file, "--user", "carol", "plain"); code != 1 || !strings.Contains(stderr, "history plain refused") {
		t.Fatalf("history of a topic without history: exit %d, %q", code, stderr)
	}
}

// --help prints on stdout and exits 0, for the server and every
// subcommand; a mistake prints the usage on stderr and exits 2.
func TestHelpOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"sub", "--help"}, {"presence", "--help"}, {"history", "-h"}, {"pub", "--help"}} {
		code, out, stderr := runCmd(t, args...)
		if code != 0 || !strings.HasPrefix(out, "Usage: rtserver") || stderr != "" {
			t.Errorf("rtserver %q: exit %d, stdout %q, stderr %q; want the usage on stdout, exit 0", args, code, out, stderr)
		}
	}
	_, out, _ := runCmd(t, "--help")
	for _, sub := range []string{"rtserver presence", "rtserver history"} {
		if !strings.Contains(out, sub) {
			t.Errorf("--help does not list %s:\n%s", sub, out)
		}
	}
	code, out, stderr := runCmd(t, "sub", "--nope")
	if code != 2 || out != "" || !strings.Contains(stderr, "flag provided but not defined: -nope") || !strings.Contains(stderr, "Usage: rtserver sub") {
		t.Errorf("sub --nope: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
