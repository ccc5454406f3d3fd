package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/leakcheck"
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
	_, addr := testnode.Start(t, cfg)
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
