package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// publishAtScript connects, says each state change, and on a line on its
// stdin calls publishAt, says it did, and prints the position it resolves
// with (or its error).
const publishAtScript = `
const { connect } = await import(process.argv[1]);
const say = (o) => console.log(JSON.stringify(o));
const c = connect(process.argv[2], { minBackoffMs: 50, maxBackoffMs: 200, onError: () => {}, onState: (state) => say({ state }) });
process.stdin.once("data", async () => {
  const done = c.publishAt("room:js", { n: 1 }, { signal: AbortSignal.timeout(60000) });
  say({ sent: true });
  try {
    say({ result: await done });
  } catch (e) {
    say({ error: String(e && (e.message || e)) });
  }
  c.close();
  process.exit(0);
});
`

// TestJSPublishAtResendsAfterARestart: the JavaScript client's publishAt,
// called while its instance is down (stopped on SIGTERM), is sent on the
// next connection once a new process serves the address, and stored
// once: the position it resolves with is the one message history holds.
func TestJSPublishAtResendsAfterARestart(t *testing.T) {
	leakcheck.Check(t)
	node := testkit.Program(t, "node", "apt-get install nodejs")
	cfg := historyConfig(100, "5m", "drain: {duration: 200ms}\n")
	p := start(t, cfg)
	mod, err := filepath.Abs("../clients/js/rtclient.js")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--experimental-websocket", "--no-warnings", "--input-type=module", "-e", publishAtScript, mod, p.WS())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testkit.LogBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	await := func(what string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					if strings.Contains(stderr.String(), "WebSocket is not defined") {
						t.Skipf("this Node.js has no WebSocket: %s", stderr.String())
					}
					t.Fatalf("node ended before %s: %s", what, stderr.String())
				}
				if strings.Contains(l, what) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
		}
	}

	await(`"state":"open"`)
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	await(`"sent":true`)
	p = startAt(t, p.Addr, cfg)
	p.waitReady()
	line := await(`"result"`)
	var res struct {
		Result *histResult
		Error  string
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil || res.Result == nil {
		t.Fatalf("publishAt answered %s", line)
	}
	c := wstest.Dial(t, p.WS())
	h := histCall(t, c, "history", `{"topic":"room:js"}`)
	if len(h.Messages) != 1 || h.Messages[0].Offset != res.Result.Offset || h.Epoch != res.Result.Epoch || string(h.Messages[0].Data) != `{"n":1}` {
		t.Fatalf("history holds %+v, publishAt resolved with %+v", h, *res.Result)
	}
}
