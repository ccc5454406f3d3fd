package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// The browser client's tests (clients/js/rtclient_test.js) pass in Node.js
// too, live ones included, against the chat example on a real listener.
// Node 20 has its WebSocket behind --experimental-websocket (22 and later
// have it anyway); a Node without one skips, saying so.
func TestClientTestsInNode(t *testing.T) {
	node := testkit.Program(t, "node", "apt-get install nodejs")
	ctx := testContext(t, 60*time.Second)
	probe, err := exec.CommandContext(ctx, node, "--experimental-websocket", "-e", "process.stdout.write(typeof WebSocket)").Output()
	if err != nil || string(probe) != "function" {
		t.Skipf("this Node.js has no built-in WebSocket (%q, %v): Node 20 with --experimental-websocket or 22+ runs these tests", probe, err)
	}
	a := startApp(t, options{}, "")
	cmd := exec.CommandContext(ctx, node, "--experimental-websocket", "--no-warnings", "../../clients/js/test_node.js", "ws://"+a.addr+"/ws")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var res struct {
		Passed   int
		Failures []string
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
		t.Fatalf("node: %v (%v)\nstdout: %s\nstderr: %s", runErr, err, stdout.String(), stderr.String())
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	if res.Passed == 0 || (runErr != nil && len(res.Failures) == 0) {
		t.Fatalf("node: %v, %d passed\nstderr: %s", runErr, res.Passed, strings.TrimSpace(stderr.String()))
	}
	t.Logf("%d JavaScript tests passed in Node.js", res.Passed)
}
